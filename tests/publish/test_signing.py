"""Signed builds: `kbuild sign`'s bundles (minted here by the local Sigstore stand-in, since
Sigstore's services cannot be reached) checked by `kbuild verify`, by kernels 0.19.1's own
verifier and by kbuild's loader under a signer policy."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sigstore", reason="the sigstore package (kbuild[sign]) is not installed")

from conftest import kbuild  # noqa: E402
from kernel_builder.checks.variant_checks import variant_folders  # noqa: E402
from kernel_builder.errors import KbuildError  # noqa: E402
from kernel_builder.publish.signing import sign_build, stale_signatures  # noqa: E402
from kernel_builder.runtime import load_local  # noqa: E402
from kernel_builder.runtime.loader import DigestMismatchError, SignatureRefusedError  # noqa: E402
from kernel_builder.runtime.signatures import SignaturePolicy  # noqa: E402
from kernel_builder.testing.sigstore_standin import GitHubIdentity, SigstoreStandIn  # noqa: E402

VARIANT = "torch213-cxx11-cpu-x86_64-linux"
MYORG = GitHubIdentity("myorg", "relu", ".github/workflows/release.yaml", "refs/tags/v1.2.0")
KERNELS_COMMUNITY = GitHubIdentity("huggingface", "kernels-community", ".github/workflows/build.yaml",
                                   "refs/heads/main")


@pytest.fixture(scope="module")
def standin() -> SigstoreStandIn:
    return SigstoreStandIn()


def _signed_copy(relu_cpu: Path, dest: Path, standin: SigstoreStandIn, identity: GitHubIdentity) -> Path:
    build = Path(shutil.copytree(relu_cpu / "build", dest / "build"))
    written = sign_build(build, lambda data: standin.sign(data, identity))
    assert [p.parent.name for p in written] == [v.name for v in variant_folders(build)]
    return build


@pytest.mark.e2e  # signs a real build (examples/relu, built once per run)
def test_kbuild_verify_says_who_signed_or_why_not(relu_cpu, standin, tmp_path):
    root = standin.write_trusted_root(tmp_path / "trusted_root.json")
    build = _signed_copy(relu_cpu, tmp_path / "signed", standin, MYORG)
    result = kbuild("verify", str(build), "--trust-root", str(root))
    assert result.returncode == 0, result.stderr
    assert f"{VARIANT}: signed by github:myorg/relu/.github/workflows/release.yaml@refs/tags/v1.2.0" in result.stdout

    # Unsigned, a rebuilt metadata.json, a foreign CA's bundle, garbage: one line each, exit 1, no traceback.
    unsigned = Path(shutil.copytree(relu_cpu / "build", tmp_path / "unsigned" / "build"))
    result = kbuild("verify", str(unsigned), "--trust-root", str(root))
    assert result.returncode == 1 and f"{VARIANT}: unsigned" in result.stdout
    variant = build / VARIANT
    metadata = variant / "metadata.json"
    original = metadata.read_bytes()
    assert stale_signatures([variant]) == []
    metadata.write_bytes(original.replace(b'"name"', b' "name"', 1))
    assert stale_signatures([variant]) == [VARIANT]  # what `kbuild publish` refuses, offline
    result = kbuild("verify", str(build), "--trust-root", str(root))
    assert result.returncode == 1 and f"{VARIANT}: broken: Bundle message digest mismatch" in result.stdout
    metadata.write_bytes(original)
    (variant / "metadata.json.sigstore").write_text(SigstoreStandIn("foreign").sign(original, MYORG))
    result = kbuild("verify", str(build), "--trust-root", str(root))
    assert result.returncode == 1 and f"{VARIANT}: broken:" in result.stdout
    (variant / "metadata.json.sigstore").write_text("{not json")
    result = kbuild("verify", str(build), "--trust-root", str(root))
    assert result.returncode == 1 and "broken: metadata.json.sigstore is not a Sigstore bundle" in result.stdout
    for r in (result,):
        assert "Traceback" not in r.stdout + r.stderr
    missing = kbuild("verify", str(tmp_path / "nowhere"), "--trust-root", str(root))
    assert missing.returncode != 0 and "Traceback" not in missing.stderr and len(missing.stderr.strip().splitlines()) == 1


def test_sign_refuses_a_folder_without_variants(tmp_path):
    with pytest.raises(KbuildError, match="no variant folders|does not exist"):
        sign_build(tmp_path / "nowhere", lambda data: "")


@pytest.mark.e2e  # signs a real build (examples/relu, built once per run)
def test_kernels_verifier_accepts_our_bundle(relu_cpu, standin, tmp_path, monkeypatch):
    """kernels 0.19.1, its trust root pointed at the stand-in: our signed variant is "correctly
    signed" for a kernels-community identity, and refused by its default policy for another."""
    from kernels._internals import verify as kernels_verify
    from kernels._rust import KernelLocation, Oid
    from sigstore.models import TrustedRoot
    from sigstore.verify import Verifier

    root = TrustedRoot.from_file(str(standin.write_trusted_root(tmp_path / "trusted_root.json")))
    monkeypatch.setattr(kernels_verify.Verifier, "production", classmethod(lambda cls, **kw: Verifier(trusted_root=root)))
    location = KernelLocation.remote("huggingface/relu", Oid.from_str("0" * 40), VARIANT)
    ours = _signed_copy(relu_cpu, tmp_path / "kc", standin, KERNELS_COMMUNITY) / VARIANT
    result = kernels_verify.verify_signature(ours, location=location, cache=False)
    assert str(result) == "the metadata is correctly signed"
    other = _signed_copy(relu_cpu, tmp_path / "myorg", standin, MYORG) / VARIANT
    result = kernels_verify.verify_signature(other, location=location, cache=False)
    assert isinstance(result, kernels_verify.SignatureVerificationResult.SignatureVerificationFailure)


@pytest.mark.e2e  # signs a real build (examples/relu, built once per run)
def test_loader_applies_the_signer_policy(relu_cpu, standin, tmp_path, monkeypatch):
    monkeypatch.setenv("KBUILD_SIGSTORE_TRUST_ROOT", str(standin.write_trusted_root(tmp_path / "root.json")))
    variant = _signed_copy(relu_cpu, tmp_path / "signed", standin, MYORG) / VARIANT
    ours = "github:myorg/*@refs/tags/v*"
    wrong = {
        "owner": "github:otherorg/*@refs/tags/v*",
        "repo": "github:myorg/gelu@refs/tags/v*",
        "workflow": "github:myorg/relu/.github/workflows/nightly.yaml@refs/tags/v*",
        "ref": "github:myorg/*@refs/heads/main",
    }
    for what, rule in wrong.items():
        with pytest.raises(SignatureRefusedError, match="signed by github:myorg/relu.* does not trust"):
            load_local(variant, signatures=SignaturePolicy.of([rule], "require"))
    # The default list is kernels' own: myorg is not on it.
    with pytest.raises(SignatureRefusedError, match="does not trust"):
        load_local(variant, signatures=SignaturePolicy.of(None, "require"))

    # A foreign CA's bundle, or a changed metadata.json: broken, refused before metadata.json is parsed.
    bundle = variant / "metadata.json.sigstore"
    good = bundle.read_text()
    bundle.write_text(SigstoreStandIn("foreign").sign((variant / "metadata.json").read_bytes(), MYORG))
    with pytest.raises(SignatureRefusedError, match="is broken"):
        load_local(variant, signatures=SignaturePolicy.of([ours], "require"))
    bundle.write_text(good)
    # Any other file changed: the signature holds, the digests (checked next) refuse it.
    init = next(variant.rglob("__init__.py"))
    source = init.read_bytes()
    init.write_bytes(source + b"\n# changed\n")
    with pytest.raises(DigestMismatchError):
        load_local(variant, signatures=SignaturePolicy.of([ours], "require"))
    init.write_bytes(source)

    # warn mode: an untrusted signer loads, with a warning naming the signer. In a fresh interpreter:
    # this worker may have loaded another relu build of the same kernel id, which its loader keeps.
    script = (
        "import sys, warnings; from pathlib import Path; from kernel_builder.runtime import load_local; "
        "from kernel_builder.runtime.signatures import SignaturePolicy\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    module = load_local(Path(sys.argv[1]), signatures=SignaturePolicy.of([sys.argv[2]], 'warn'))\n"
        "print(hasattr(module, 'relu')); print(*(w.message for w in caught), sep='\\n')\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(variant), wrong["owner"]],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded, *warned = done.stdout.splitlines()
    assert loaded == "True", done.stdout
    assert any("signed by github:myorg/relu/.github/workflows/release.yaml@refs/tags/v1.2.0" in w for w in warned), warned


def test_policy_parsing_and_environment(monkeypatch):
    from kernel_builder.runtime.signatures import DEFAULT_SIGNERS, Rule, SignatureError, Signer

    monkeypatch.delenv("KBUILD_SIGNERS", raising=False)
    monkeypatch.delenv("KBUILD_SIGNATURES", raising=False)
    default = SignaturePolicy.of()
    assert default.mode == "warn" and len(default.rules) == len(DEFAULT_SIGNERS)
    assert default.trusts(Signer("huggingface", "kernels-community", ".github/workflows/build.yaml", "refs/heads/main"))
    assert not default.trusts(Signer("huggingface", "kernels-community", ".github/workflows/evil.yaml", "refs/heads/main"))
    monkeypatch.setenv("KBUILD_SIGNERS", "github:MyOrg/*@refs/tags/v*, github:alice/relu@refs/heads/main")
    monkeypatch.setenv("KBUILD_SIGNATURES", "require")
    policy = SignaturePolicy.of()
    assert policy.mode == "require" and policy.trusts(Signer("myorg", "x", ".github/workflows/r.yaml", "refs/tags/v2"))
    assert not policy.trusts(Signer("myorg", "x", ".github/workflows/r.yaml", "refs/heads/v2"))
    for bad in ("myorg/*", "github:myorg@refs/tags/v*"):
        with pytest.raises(SignatureError, match="not of the form"):
            Rule.parse(bad)
    with pytest.raises(SignatureError, match="not one of"):
        SignaturePolicy.of(mode="strict")

