"""kernels.lock: the variant hash, both lock shapes, pyproject dependencies, and (end to
end, against the local Hub test server) `kbuild lock` and loading with a lock."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_runtime_hub import RELEASES, RELU, REPO, client_env, publish, run_client

from conftest import optional_module
from kernel_builder.runtime.lockfile import (
    LockEntry,
    LockfileError,
    LockMismatchError,
    VariantLock,
    combine_variant_hash,
    local_variant_hash,
    lock_entry_for,
    read_lockfile,
    verify_locked_variant,
)
from kernel_builder.runtime.lock_writer import read_dependencies, render_lockfile
from kernel_builder.testing import HubServer

SHA = "0123456789abcdef0123456789abcdef01234567"


def git_blob_id(data: bytes) -> str:
    """The git object id, from git itself rather than from our code."""
    return subprocess.run(["git", "hash-object", "--stdin"], input=data, capture_output=True, check=True).stdout.decode().strip()


def fake_cached_variant(root: Path, files: dict[str, tuple[bytes, bool]]) -> tuple[Path, dict[str, str]]:
    """A variant folder laid out as huggingface_hub caches it: snapshot entries are links to
    blobs named by the file's Hub object id (git blob sha1, or sha256 for LFS files)."""
    blobs = root / "blobs"
    folder = root / "snapshots" / SHA / "build" / "torch-cpu"
    blobs.mkdir(parents=True, exist_ok=True)
    oids = {}
    for rel, (data, lfs) in files.items():
        oid = hashlib.sha256(data).hexdigest() if lfs else git_blob_id(data)
        (blobs / oid).write_bytes(data)
        link = folder / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blobs / oid, link.parent))
        oids[rel] = oid
    return folder, oids


def test_local_hash_equals_the_hash_of_hub_object_ids(tmp_path):
    files = {
        "__init__.py": (b"from ._ops import ops\n", False),
        "_ops.py": (b"ops = None\n", False),
        "layers/__init__.py": (b"", False),
        "metadata.json": (b"{}", False),
        "_relu_cpu_abc1234.abi3.so": (b"\x7fELF" + bytes(range(256)) * 4, True),
    }
    folder, oids = fake_cached_variant(tmp_path, files)
    # Bytecode the interpreter writes next to the files is not part of the hash.
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"junk")

    expected = hashlib.sha256()
    for rel in sorted(oids, key=lambda p: p.encode()):
        expected.update(rel.encode() + bytes.fromhex(oids[rel]))
    assert local_variant_hash(folder) == combine_variant_hash(oids.items()) == f"sha256-{expected.hexdigest()}"
    # The same pairs as a Hub tree listing reports them, with bytecode entries, hash the same.
    assert combine_variant_hash([*oids.items(), ("__pycache__/a.pyc", "00" * 20)]) == local_variant_hash(folder)

    # Changing a cached file (through its link, as an editor would) changes the hash.
    (folder / "_ops.py").write_text("ops = 'evil'\n")
    assert local_variant_hash(folder) != combine_variant_hash(oids.items())


def test_local_hash_refuses_files_that_are_not_cache_links(tmp_path):
    folder, _ = fake_cached_variant(tmp_path, {"__init__.py": (b"x = 1\n", False)})
    (folder / "extra.py").write_text("print('hi')\n")
    with pytest.raises(LockMismatchError, match="extra.py .* not a link into the Hugging Face cache"):
        local_variant_hash(folder)


def test_verify_locked_variant(tmp_path):
    folder, oids = fake_cached_variant(tmp_path, {"__init__.py": (b"x = 1\n", False)})
    good = combine_variant_hash(oids.items())
    entry = LockEntry("acme/relu", SHA, {"torch-cpu": VariantLock(good)})
    verify_locked_variant(entry, "torch-cpu", folder)

    bad = LockEntry("acme/relu", SHA, {"torch-cpu": VariantLock("sha256-" + "0" * 64)})
    with pytest.raises(LockMismatchError) as e:
        verify_locked_variant(bad, "torch-cpu", folder, lockfile=Path("proj/kernels.lock"))
    message = e.value.message
    assert message.startswith("refusing to load acme/relu@0123456: variant torch-cpu hashes to " + good)
    assert "proj/kernels.lock locks sha256-000" in message and "Nothing was imported" in message

    with pytest.raises(LockMismatchError, match="has no hash for variant torch-cuda.*locked variants: torch-cpu"):
        verify_locked_variant(entry, "torch-cuda", folder)
    with pytest.raises(LockMismatchError, match="hash type 'md5'"):
        verify_locked_variant(LockEntry("acme/relu", SHA, {"torch-cpu": VariantLock(good, "md5")}), "torch-cpu", folder)
    # kernels 0.17's shape pins the commit only: nothing to compare here.
    verify_locked_variant(LockEntry("acme/relu", SHA, None, 1), "torch-cpu", folder)


def test_both_lock_shapes_read_and_kernels_reads_ours(tmp_path):
    optional_module("kernels")
    entries = [
        LockEntry("kernels-community/relu", SHA, {"torch-cpu": VariantLock("sha256-" + "1" * 64)}, 1),
        LockEntry("acme/fused", "f" * 40, {"torch-cuda": VariantLock("sha256-" + "2" * 64)}, ">=1.0,<2.0"),
    ]
    ours = json.loads(render_lockfile(entries))
    assert ours == [
        {"repo_id": "acme/fused", "sha": "f" * 40,
         "variants": {"torch-cuda": {"hash": "sha256-" + "2" * 64, "hash_type": "git_lfs_concat"}}},
        {"repo_id": "kernels-community/relu", "sha": SHA,
         "variants": {"torch-cpu": {"hash": "sha256-" + "1" * 64, "hash_type": "git_lfs_concat"}}},
    ]
    path = tmp_path / "kernels.lock"
    path.write_text(render_lockfile(entries))
    assert lock_entry_for(path, "kernels-community/relu") == LockEntry(
        "kernels-community/relu", SHA, {"torch-cpu": VariantLock("sha256-" + "1" * 64)}
    )

    # --format kernels: what kernels 0.17.2 itself writes, and reads back with its parser.
    from kernels._rust import KernelDependency, KernelLock, KernelLocks, KernelVersion

    text = render_lockfile(entries, "kernels")
    theirs = KernelLocks(
        {
            KernelDependency("kernels-community/relu", KernelVersion.Version(1)): KernelLock(SHA),
            KernelDependency("acme/fused", KernelVersion.Revision(">=1.0,<2.0")): KernelLock("f" * 40),
        }
    )
    assert KernelLocks.from_json(text) == theirs
    assert json.loads(text) == json.loads(theirs.to_json())
    path.write_text(theirs.to_json())
    assert [(e.repo_id, e.sha, e.variants, e.requested) for e in read_lockfile(path)] == [
        ("acme/fused", "f" * 40, None, ">=1.0,<2.0"),
        ("kernels-community/relu", SHA, None, 1),
    ]


@pytest.mark.parametrize(
    "text, words",
    [
        ("{", "is not valid JSON"),
        ("{}", "must hold a JSON list"),
        ('[{"repo_id": "a/b", "sha": "main", "variants": {}}]', "40 lowercase hex digits"),
        ('[{"repo_id": "a/b", "sha": "' + SHA + '"}]', "'variants' must be an object"),
        ('[{"repo_id": "a/b", "sha": "' + SHA + '", "variants": {"torch-cpu": {}}}]', "must have a string 'hash'"),
    ],
)
def test_malformed_lock_files_are_one_line_errors(tmp_path, text, words):
    path = tmp_path / "kernels.lock"
    path.write_text(text)
    with pytest.raises(LockfileError) as e:
        read_lockfile(path)
    assert words in e.value.message and str(path) in e.value.message and "\n" not in e.value.message


def test_missing_lock_and_unlocked_repo(tmp_path):
    with pytest.raises(LockfileError, match="does not exist; create it with `kbuild lock"):
        read_lockfile(tmp_path / "kernels.lock")
    (tmp_path / "kernels.lock").write_text("[]")
    with pytest.raises(LockfileError, match=r"acme/relu is not locked in .* \(locked: none\)"):
        lock_entry_for(tmp_path / "kernels.lock", "acme/relu")


def test_read_dependencies(tmp_path):
    with pytest.raises(LockfileError, match="pyproject.toml does not exist"):
        read_dependencies(tmp_path)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\n')
    with pytest.raises(LockfileError, match="declares no kernels") as e:
        read_dependencies(tmp_path)
    assert "\n" not in e.value.message
    pyproject.write_text('[tool.kernels.dependencies]\n"not a repo" = 1\n')
    with pytest.raises(LockfileError, match="invalid kernel repo id"):
        read_dependencies(tmp_path)
    pyproject.write_text('[tool.kernels.dependencies]\n"a/b" = 1.5\n')
    with pytest.raises(LockfileError, match="must be a major version"):
        read_dependencies(tmp_path)
    pyproject.write_text('[tool.kernels.dependencies]\n"a/b" = 1\n"c/d" = " >=1.0,<2.0 "\n"e/f" = "v1.2.0"\n')
    assert read_dependencies(tmp_path) == {"a/b": 1, "c/d": ">=1.0,<2.0", "e/f": "v1.2.0"}


# == end to end: `kbuild lock` and locked loads against the local Hub test server ===========
# `kbuild lock` through kbuild's own entry point (which turns KbuildError into one line).
KBUILD = "import sys, kernel_builder.cli.main as cli; sys.argv[0] = 'kbuild'; cli.main()"


def kbuild_lock(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", KBUILD, "lock", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def lock_hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("lock-hub")
    with HubServer(root / "hub") as server:
        commits = publish(server, root, RELU, RELEASES)
        acme = publish(server, root, "acme/fused", [("v1.0.0", "v1", "v1.0.0", 50), ("v1.2.0", "v1", "v1.2.0", 52)])
        yield SimpleNamespace(server=server, commits=commits, acme=acme)


def make_project(folder: Path, deps: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(f'[project]\nname = "app"\nversion = "0.1"\n\n[tool.kernels.dependencies]\n{deps}')
    return folder


@pytest.mark.e2e
def test_kbuild_lock_writes_the_lock_and_locked_loads_verify_it(lock_hub, tmp_path):
    env = client_env(lock_hub.server, tmp_path)
    project = make_project(tmp_path / "app", f'"{RELU}" = 1\n"acme/fused" = ">=1.0,<2.0"\n')
    result = kbuild_lock(env, str(project))
    assert result.returncode == 0, result.stderr
    assert f"locked {RELU} (version 1) at {lock_hub.commits['v1-head'][:7]}, 2 variants" in result.stdout
    assert f"wrote {project / 'kernels.lock'}" in result.stdout

    lock = json.loads((project / "kernels.lock").read_text())
    assert [(e["repo_id"], e["sha"], sorted(e["variants"])) for e in lock] == [
        ("acme/fused", lock_hub.acme["v1.2.0"], ["torch-cpu", "torch-cuda"]),
        (RELU, lock_hub.commits["v1-head"], ["torch-cpu", "torch-cuda"]),
    ]
    assert all(v["hash_type"] == "git_lfs_concat" and v["hash"].startswith("sha256-") for e in lock for v in e["variants"].values())

    # The lock's hash (from the Hub's tree listing) is the hash of the downloaded bytes.
    lockfile = str(project / "kernels.lock")
    loaded = run_client(env, (RELU, {"lockfile": lockfile}), ("acme/fused", {"lockfile": lockfile, "trust_remote_code": True}))
    assert [(r["value"], r["sha"]) for r in loaded[:2]] == [(12, lock_hub.commits["v1-head"]), (52, lock_hub.acme["v1.2.0"])]
    assert local_variant_hash(loaded[0]["path"]) == lock[1]["variants"]["torch-cpu"]["hash"]

    # A lock whose hash does not match what is downloaded is refused, naming both hashes.
    lock[1]["variants"]["torch-cpu"]["hash"] = "sha256-" + "0" * 64
    (project / "kernels.lock").write_text(json.dumps(lock))
    refused = run_client(env, (RELU, {"lockfile": lockfile}))[0]
    assert refused["type"] == "LockMismatchError"
    assert refused["error"].startswith(f"refusing to load {RELU}@{lock_hub.commits['v1-head'][:7]}: variant torch-cpu hashes to sha256-")
    assert f"but {lockfile} locks sha256-{'0' * 64}" in refused["error"]

    # And so is a cached file changed after the lock was written, even before its digests are read.
    make_project(project, f'"{RELU}" = 1\n')
    assert kbuild_lock(env, str(project)).returncode == 0
    impl = Path(loaded[0]["path"]) / "_impl.py"
    impl.write_text("value = 666\n")
    tampered = run_client(env, (RELU, {"lockfile": lockfile}))[0]
    assert tampered["type"] == "LockMismatchError" and "Nothing was imported" in tampered["error"]

    unlocked = run_client(env, ("acme/fused", {"lockfile": lockfile}))[0]
    assert unlocked["error"].startswith(f"acme/fused is not locked in {lockfile} (locked: {RELU})")
    both = run_client(env, (RELU, {"lockfile": lockfile, "version": 1}))[0]
    assert both["type"] == "KernelVersionError" and "either lockfile= or a version" in both["error"]


@pytest.mark.e2e
def test_kbuild_lock_kernels_format_is_read_by_kernels(lock_hub, tmp_path):
    from kernels._rust import KernelDependency, KernelLocks, KernelVersion

    env = client_env(lock_hub.server, tmp_path)
    project = make_project(tmp_path / "app", f'"{RELU}" = 1\n')
    result = kbuild_lock(env, str(project), "--format", "kernels")
    assert result.returncode == 0, result.stderr
    locks = KernelLocks.from_json((project / "kernels.lock").read_text())
    # kernels 0.19 returns the commit as an Oid; its str() is the hex id.
    assert str(locks[KernelDependency(RELU, KernelVersion.Version(1))].commit) == lock_hub.commits["v1-head"]
    # Loading with it pins the commit (there are no variant hashes in this shape to compare).
    loaded = run_client(env, (RELU, {"lockfile": str(project / "kernels.lock")}))[0]
    assert (loaded["value"], loaded["sha"]) == (12, lock_hub.commits["v1-head"])


@pytest.mark.e2e
@pytest.mark.parametrize(
    "deps, words",
    [
        (None, "pyproject.toml does not exist"),
        ('"kernels-community/nope" = 1\n', "kernel repo kernels-community/nope was not found on http://127.0.0.1:"),
        (f'"{RELU}" = 7\n', f"{RELU} has no branch v7 (version=7); version branches: v1, v2"),
        (f'"{RELU}" = ">=5.0"\n', f"no release tag of {RELU} matches '>=5.0'; tags: v1.0.0, v1.1.0, v2.0.0"),
    ],
)
def test_kbuild_lock_errors_are_one_line(lock_hub, tmp_path, deps, words):
    project = tmp_path / "app"
    project.mkdir()
    if deps is not None:
        make_project(project, deps)
    result = kbuild_lock(client_env(lock_hub.server, tmp_path), str(project))
    assert result.returncode == 1
    assert result.stderr.startswith("kbuild: error: ") and words in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (project / "kernels.lock").exists()
