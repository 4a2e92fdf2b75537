"""Sign -> publish to the Hub test server -> load by version under a signer policy, end to end
(the stand-in's bundles, since Sigstore's services cannot be reached)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_runtime_hub import PUBLISH, REPO, client_env, make_noarch_kernel, run_client

pytest.importorskip("sigstore", reason="the sigstore package (kbuild[sign]) is not installed")

from kernel_builder.publish.signing import sign_build  # noqa: E402
from kernel_builder.runtime.lockfile import local_variant_hash  # noqa: E402
from kernel_builder.testing import HubServer  # noqa: E402
from kernel_builder.testing.sigstore_standin import GitHubIdentity, SigstoreStandIn  # noqa: E402

MYORG = GitHubIdentity("myorg", "relu", ".github/workflows/release.yaml", "refs/tags/v1.2.0")


@pytest.mark.e2e
def test_sign_publish_load_by_version_with_a_policy(tmp_path):
    """Sign -> publish to the Hub test server -> get_kernel by version under a policy (env var,
    then the lock file's signers), in a fresh process as a user would."""
    standin = SigstoreStandIn()
    repo_id = "myorg/relu"
    kernel = make_noarch_kernel(tmp_path / "relu", "relu", 10)
    sign_build(kernel / "build", lambda data: standin.sign(data, MYORG))
    with HubServer(tmp_path / "hub") as server:
        job = {"repo_id": repo_id, "repo_type": "kernel",
               "releases": [{"label": "v1.0.0", "branch": "v1", "tag": "v1.0.0", "folder": str(kernel)}]}
        env = client_env(server, tmp_path, KBUILD_SIGSTORE_TRUST_ROOT=str(standin.write_trusted_root(tmp_path / "r.json")),
                         KBUILD_SIGNATURES="require")
        done = subprocess.run([sys.executable, "-c", PUBLISH, json.dumps(job)], env=env, cwd=REPO,
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        sha = json.loads(done.stdout.strip().splitlines()[-1])["v1.0.0"]
        trusted = dict(env, KBUILD_SIGNERS="github:myorg/*@refs/tags/v*")
        loaded = run_client(trusted, (repo_id, {"version": 1, "trust_remote_code": True}))[0]
        assert loaded["value"] == 10, loaded
        # `kbuild verify REPO@VERSION` names the signer of every variant, the one this machine
        # cannot load included, from their metadata.json and bundles alone.
        verified = subprocess.run([sys.executable, "-m", "kernel_builder.cli", "verify", f"{repo_id}@v1.0.0"],
                                  env=env, capture_output=True, text=True, check=False)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        for variant in ("torch-cpu", "torch-cuda"):
            assert f"{variant}: signed by github:myorg/relu/.github/workflows/release.yaml@refs/tags/v1.2.0" in verified.stdout
        (cuda,) = {p.parent for p in Path(env["HF_HOME"]).rglob("torch-cuda/metadata.json")}
        assert sorted(p.name for p in cuda.iterdir()) == ["metadata.json", "metadata.json.sigstore"]  # no code
        # kernels' default list does not name myorg: refused in require mode, naming the signer.
        refused = run_client(env, (repo_id, {"version": 1, "trust_remote_code": True}))[0]
        assert refused["type"] == "SignatureRefusedError"
        assert "signed by github:myorg/relu/.github/workflows/release.yaml@refs/tags/v1.2.0" in refused["error"]
        # The lock file's signers apply to a locked load.
        lock = tmp_path / "kernels.lock"
        for signers, ok in ((["github:myorg/relu@refs/tags/v*"], True), (["github:myorg/relu@refs/heads/main"], False)):
            lock.write_text(json.dumps([{"repo_id": repo_id, "sha": sha, "signers": signers,
                                         "variants": {loaded["variant"]: {"hash": local_variant_hash(loaded["path"])}}}]))
            result = run_client(env, (repo_id, {"lockfile": str(lock), "trust_remote_code": True}))[0]
            assert (result.get("value") == 10) if ok else (result["type"] == "SignatureRefusedError"), result


def test_local_signed_variant_under_policies(tmp_path, monkeypatch):
    """In-process, a pure-Python variant (the fast lane's check): unsigned and an untrusted signer
    are refused in require mode; in warn mode the untrusted signer loads with a warning."""
    from kernel_builder.runtime import SignaturePolicy, SignatureRefusedError, load_local

    standin = SigstoreStandIn()
    monkeypatch.setenv("KBUILD_SIGSTORE_TRUST_ROOT", str(standin.write_trusted_root(tmp_path / "root.json")))
    kernel = make_noarch_kernel(tmp_path / "k", "signed-local", 31, variants=("torch-cpu",))
    variant = kernel / "build" / "torch-cpu"
    unsigned = SignaturePolicy.of(["github:myorg/*@refs/tags/v*"], "require")
    with pytest.raises(SignatureRefusedError, match="is unsigned; refused"):
        load_local(variant, backend="cpu", signatures=unsigned)
    sign_build(kernel, lambda data: standin.sign(data, MYORG))
    with pytest.raises(SignatureRefusedError, match="does not trust"):
        load_local(variant, backend="cpu", signatures=SignaturePolicy.of(["github:myorg/*@refs/heads/*"], "require"))
    with pytest.warns(UserWarning, match="does not trust"):
        assert load_local(variant, backend="cpu", signatures=SignaturePolicy.of(["github:x/*@*"], "warn")).value == 31


def test_kernels_community_signed_variant_loads_under_the_default_policy(tmp_path, monkeypatch):
    """A variant signed as kernels-community's build workflow signs (bundle beside metadata.json,
    out of the digest) loads in require mode with the default list, which is kernels' own."""
    from kernel_builder.runtime import SignaturePolicy, load_local

    standin = SigstoreStandIn()
    monkeypatch.setenv("KBUILD_SIGSTORE_TRUST_ROOT", str(standin.write_trusted_root(tmp_path / "root.json")))
    monkeypatch.delenv("KBUILD_SIGNERS", raising=False)
    kernel = make_noarch_kernel(tmp_path / "k", "kc-signed", 41, variants=("torch-cpu",))
    community = GitHubIdentity("huggingface", "kernels-community", ".github/workflows/build.yaml", "refs/heads/main")
    sign_build(kernel, lambda data: standin.sign(data, community))
    module = load_local(kernel / "build" / "torch-cpu", backend="cpu", signatures=SignaturePolicy.of(None, "require"))
    assert module.value == 41


def test_lock_entries_keep_and_check_their_signers(tmp_path):
    """A lock entry's `signers` is read, checked as rules, written back, and kept by relocking."""
    from kernel_builder.runtime.lock_writer import _keep_signers
    from kernel_builder.runtime.lockfile import LockEntry, LockfileError, read_lockfile

    lock = tmp_path / "kernels.lock"
    entry = {"repo_id": "MyOrg/relu", "sha": "a" * 40, "variants": {}, "signers": ["github:myorg/*@refs/tags/v*"]}
    lock.write_text(json.dumps([entry]))
    (read,) = read_lockfile(lock)
    assert read.signers == ("github:myorg/*@refs/tags/v*",) and read.to_json()["signers"] == entry["signers"]
    relocked = _keep_signers(lock, [LockEntry("myorg/relu", "b" * 40, {}), LockEntry("other/k", "c" * 40, {})])
    assert [e.signers for e in relocked] == [("github:myorg/*@refs/tags/v*",), None]
    lock.write_text(json.dumps([dict(entry, signers=["myorg/*"])]))
    with pytest.raises(LockfileError, match="not of the form github:OWNER/REPO"):
        read_lockfile(lock)
