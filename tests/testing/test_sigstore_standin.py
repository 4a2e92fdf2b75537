"""The local Sigstore stand-in mints bundles that the real, unmodified sigstore verifier accepts
against the trusted root file it writes, and that it refuses when anything is off."""

import json

import pytest

sigstore = pytest.importorskip("sigstore", reason="the sigstore package (kbuild[sign]) is not installed")

from sigstore.errors import VerificationError  # noqa: E402
from sigstore.models import Bundle, TrustedRoot  # noqa: E402
from sigstore.verify import Verifier, policy  # noqa: E402

from kernel_builder.testing.sigstore_standin import GITHUB_ISSUER, GitHubIdentity, SigstoreStandIn  # noqa: E402

IDENTITY = GitHubIdentity("myorg", "relu", ".github/workflows/release.yaml", "refs/tags/v1.0.0")


def _verifier(standin: SigstoreStandIn, tmp_path) -> Verifier:
    return Verifier(trusted_root=TrustedRoot.from_file(str(standin.write_trusted_root(tmp_path / "root.json"))))


def test_real_verifier_accepts_standin_bundles(tmp_path):
    standin = SigstoreStandIn()
    verifier = _verifier(standin, tmp_path)
    # Several entries, so the inclusion proofs are not trivially empty.
    bundles = [Bundle.from_json(standin.sign(b"artifact %d" % i, IDENTITY)) for i in range(5)]
    identity = policy.Identity(identity=IDENTITY.signer_uri, issuer=GITHUB_ISSUER)
    for i, bundle in enumerate(bundles):
        verifier.verify_artifact(b"artifact %d" % i, bundle, identity)
        assert len(bundle.log_entry._inner.inclusion_proof.hashes) > 0 or i == 0
    assert json.loads(bundles[0].to_json())["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"


def test_real_verifier_refuses_what_is_off(tmp_path):
    standin = SigstoreStandIn()
    verifier = _verifier(standin, tmp_path)
    bundle = Bundle.from_json(standin.sign(b"artifact", IDENTITY))
    with pytest.raises(VerificationError, match="digest mismatch"):
        verifier.verify_artifact(b"changed", bundle, policy.UnsafeNoOp())
    other = GitHubIdentity("someone", "relu", IDENTITY.workflow, IDENTITY.ref)
    with pytest.raises(VerificationError):
        verifier.verify_artifact(b"artifact", bundle, policy.Identity(identity=other.signer_uri, issuer=GITHUB_ISSUER))
    foreign = Bundle.from_json(SigstoreStandIn("foreign").sign(b"artifact", IDENTITY))
    with pytest.raises(VerificationError):
        verifier.verify_artifact(b"artifact", foreign, policy.UnsafeNoOp())


@pytest.mark.e2e  # serves on loopback, runs the kbuild CLI in a subprocess
def test_kbuild_sign_runs_the_real_signing_client_against_the_standin_on_loopback(tmp_path):
    """`kbuild sign` (sigstore-python's SigningContext, unmodified) gets its certificate from the
    stand-in's Fulcio and its log entry from its Rekor on 127.0.0.1, with the token picked up as
    in a GitHub Actions job (ACTIONS_ID_TOKEN_REQUEST_URL); `kbuild verify` names the signer."""
    import os

    from conftest import kbuild
    from kernel_builder.testing.sigstore_server import SigstoreServer

    variant = tmp_path / "build" / "torch-cpu"
    variant.mkdir(parents=True)
    (variant / "metadata.json").write_text('{"name": "relu"}')
    standin = SigstoreStandIn()
    root = standin.write_trusted_root(tmp_path / "root.json")
    with SigstoreServer(standin, IDENTITY) as server:
        env = {"GITHUB_ACTIONS": "true", "ACTIONS_ID_TOKEN_REQUEST_URL": f"{server.url}/token?v=1",
               "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "runner-token"}
        env = {k: v for k, v in {**os.environ, **env}.items() if k != "KBUILD_IDENTITY_TOKEN"}
        config = server.client_trust_config(tmp_path / "trust_config.json")
        signed = kbuild("sign", str(tmp_path / "build"), "--trust-config", str(config), env=env)
        assert signed.returncode == 0, signed.stderr
        assert f"signed {variant / 'metadata.json.sigstore'}" in signed.stdout
    checked = kbuild("verify", str(tmp_path / "build"), "--trust-root", str(root))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"torch-cpu: signed by github:myorg/relu/{IDENTITY.workflow}@{IDENTITY.ref}" in checked.stdout
    # Without any identity: one line, no traceback.
    bare = {k: v for k, v in os.environ.items() if not k.startswith(("ACTIONS_ID_TOKEN", "GITHUB_ACTIONS"))}
    refused = kbuild("sign", str(tmp_path / "build"), "--trust-config", str(config), env=bare)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
