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
