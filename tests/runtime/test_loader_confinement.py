"""Loader confinement (issue 14, "Loading"): a variant folder is trusted only if every entry
is a regular file or folder covered by its digest, code runs only from verified bytes (never
from a bytecode cache), metadata fields used in paths are validated, trust_remote_code takes
only its documented forms, and every JSON the runtime reads is bounded, with a one-line
error naming the file. Against a real CPU build of examples/relu."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import kbuild
from kernel_builder.runtime import KernelLoadError, get_kernel, read_metadata, verify_digest
from kernel_builder.runtime.files import MAX_JSON_DEPTH
from kernel_builder.runtime.trust import UntrustedKernelError, check_trust

VARIANT = "torch213-cxx11-cpu-x86_64-linux"


@pytest.fixture(scope="module")
def built(relu_cpu) -> Path:
    return relu_cpu / "build" / VARIANT  # conftest.py: built once per session, only read here


@pytest.fixture
def variant(built, tmp_path) -> Path:
    """A private copy of the built variant (mtimes kept, as the pyc trick needs them)."""
    copy = tmp_path / "build" / VARIANT
    shutil.copytree(built, copy, symlinks=True)
    return copy


LOAD = """
    import sys, torch
    from kernel_builder.errors import KbuildError
    from kernel_builder.runtime import load_local
    try:
        m = load_local({folder!r})
    except KbuildError as e:
        print("ERROR:", e.message)
        sys.exit(1)
    assert m.relu(torch.tensor([-1.0, 2.0])).tolist() == [0.0, 2.0]
    print("EVIL" if getattr(m.layers, "EVIL", False) else "clean")
"""


def load(folder: Path, *, timeout: int = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """load_local in a fresh interpreter (a kernel id is imported once per process)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(LOAD.format(folder=str(folder)))],
        capture_output=True, text=True, timeout=timeout, check=False, env=dict(os.environ, **(env or {})),
    )


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ERROR:"), result.stdout
    return lines[0]


# -- 1. bytecode caches ------------------------------------------------------------------
def plant_pyc(variant: Path, module: str, evil_source: str) -> Path:
    """A .pyc of `evil_source` whose header carries the real module's mtime and size, so
    Python's own loader takes it for a fresh cache of the verified source."""
    from importlib._bootstrap_external import _code_to_timestamp_pyc

    source = variant / f"{module}.py"
    st = source.stat()
    code = compile(evil_source, str(source), "exec")
    pyc = Path(importlib.util.cache_from_source(str(source)))
    pyc.parent.mkdir(exist_ok=True)
    pyc.write_bytes(_code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size))
    return pyc


@pytest.mark.e2e
def test_a_planted_pyc_does_not_run(variant):
    real = (variant / "layers.py").read_text()
    plant_pyc(variant, "layers", "EVIL = True\n" + real)
    assert verify_digest(variant, read_metadata(variant)) == []  # the digest skips __pycache__

    # Python's own import takes the planted bytecode (the attack the loader must resist).
    probe = f"""
        import importlib.util, sys
        spec = importlib.util.spec_from_file_location("probe_layers", {str(variant / "layers.py")!r})
        m = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(m)
        except ImportError:  # its relative imports need the package; EVIL ran first
            pass
        print("EVIL" if getattr(m, "EVIL", False) else "clean")
    """
    plain = subprocess.run([sys.executable, "-c", textwrap.dedent(probe)], capture_output=True, text=True, check=False)
    assert plain.stdout.strip() == "EVIL", plain.stderr

    result = load(variant)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "clean"


@pytest.mark.e2e
def test_loading_reads_and_writes_no_bytecode(variant):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(LOAD.format(folder=str(variant)))],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )
    assert result.stdout.strip() == "clean", result.stderr
    assert not list(variant.rglob("__pycache__")) and not list(variant.rglob("*.pyc"))


@pytest.mark.e2e
def test_a_stray_sourceless_module_is_not_imported(variant):
    """`x.pyc` beside the sources is skipped by the digest; the loader never imports it."""
    code = compile("EVIL = True\n", "stray", "exec")
    from importlib._bootstrap_external import _code_to_timestamp_pyc

    (variant / "stray.pyc").write_bytes(_code_to_timestamp_pyc(code, 0, 0))
    script = LOAD.format(folder=str(variant)).replace(
        'print("EVIL"', 'import importlib\n    try:\n        importlib.import_module(m.__name__ + ".stray")\n'
        '        print("imported stray")\n    except ModuleNotFoundError:\n        pass\n    print("EVIL"'
    )
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "clean"


@pytest.mark.e2e
def test_a_file_changed_after_the_check_is_refused_at_import(variant):
    from kernel_builder.runtime.verified_import import TamperedError, VerifiedPackage

    metadata = read_metadata(variant)
    package = VerifiedPackage(metadata["id"], variant, metadata["digest"]["files"], "sha256")
    assert b"def relu" in package.read("__init__.py")
    (variant / "_ops.py").write_text("EVIL = True\n")
    with pytest.raises(TamperedError, match="_ops.py no longer matches its digest"):
        package.read("_ops.py")


# -- 2. entries that are not regular files or folders -----------------------------------
@pytest.mark.e2e
def test_a_symlinked_folder_is_refused(variant, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "__init__.py").write_text("EVIL = True\n")
    (variant / "_ops").symlink_to(elsewhere, target_is_directory=True)  # a package shadows _ops.py
    line = one_line_error(load(variant))
    assert "_ops: a symlink" in line and str(elsewhere) in line


@pytest.mark.e2e
def test_a_symlinked_file_is_refused(variant, tmp_path):
    (tmp_path / "other.py").write_text((variant / "layers.py").read_text())
    (variant / "layers.py").unlink()
    (variant / "layers.py").symlink_to(tmp_path / "other.py")  # same bytes, so the digest alone would pass
    assert "layers.py: a symlink" in one_line_error(load(variant))


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link", "fifo-metadata"])
def test_a_fifo_or_device_does_not_hang(variant, kind):
    if kind == "fifo":
        os.mkfifo(variant / "data.bin")
        expected = "data.bin: a FIFO"
    elif kind == "dev-zero-link":
        (variant / "zeros.bin").symlink_to("/dev/zero")
        expected = "zeros.bin: a symlink"
    else:
        (variant / "metadata.json").unlink()
        os.mkfifo(variant / "metadata.json")
        expected = "metadata.json is a FIFO, not a regular file"
    assert expected in one_line_error(load(variant, timeout=60))

    check = kbuild("check", str(variant), "--json")  # the same digest code: no hang either
    assert "Traceback" not in check.stderr, check.stderr
    assert check.returncode != 0 and expected.split(":")[0].split(" ")[0] in check.stdout + check.stderr


@pytest.mark.e2e
def test_an_extra_file_is_refused_and_pycache_is_ignored(variant):
    (variant / "__pycache__").mkdir()
    (variant / "__pycache__" / "anything.pyc").write_bytes(b"\0")
    assert verify_digest(variant, read_metadata(variant)) == []
    (variant / "extra.py").write_text("")
    assert "extra.py: unknown file" in one_line_error(load(variant))


SHA = "a" * 40


def hub_cache(built: Path, root: Path) -> Path:
    """`built` as huggingface_hub caches a download of acme/relu at SHA: snapshot files are
    links into the repo's blobs/ (named by their sha256), and kbuild's record says it is complete."""
    import hashlib

    repo = root / "kernels--acme--relu"
    folder = repo / "snapshots" / SHA / "build" / VARIANT
    (repo / "blobs").mkdir(parents=True)
    for file in sorted(built.rglob("*")):
        target = folder / file.relative_to(built)
        target.parent.mkdir(parents=True, exist_ok=True)
        if file.is_dir():
            target.mkdir(exist_ok=True)
            continue
        blob = repo / "blobs" / hashlib.sha256(file.read_bytes()).hexdigest()
        shutil.copy2(file, blob)
        target.symlink_to(os.path.relpath(blob, target.parent))
    record = {"format": 1, "variants": {SHA: [VARIANT]}, "complete": {SHA: [VARIANT]}}
    (repo / "kbuild.json").write_text(json.dumps(record))
    return folder


GET = """
    import sys, torch
    from kernel_builder.errors import KbuildError
    from kernel_builder.runtime import get_kernel
    try:
        pin = dict(lockfile={lock!r}) if {lock!r} else dict(revision={sha!r})
        m = get_kernel("acme/relu", local_files_only=True, cache_dir={cache!r}, trust_remote_code=True, **pin)
    except KbuildError as e:
        print("ERROR:", e.message)
        sys.exit(1)
    assert m.relu(torch.tensor([-1.0, 2.0])).tolist() == [0.0, 2.0]
    print("EVIL" if getattr(m.layers, "EVIL", False) else "clean")
"""


def get(cache: Path, lock: Path | None = None) -> subprocess.CompletedProcess:
    script = GET.format(sha=SHA, cache=str(cache), lock=str(lock) if lock else None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.e2e
def test_hub_cache_links_into_blobs_are_the_only_links_accepted(built, tmp_path):
    folder = hub_cache(built, tmp_path)
    assert verify_digest(folder, read_metadata(folder)) == []
    (tmp_path / "outside.py").write_text((built / "layers.py").read_text())
    (folder / "layers.py").unlink()
    (folder / "layers.py").symlink_to(tmp_path / "outside.py")
    assert any(p.startswith("layers.py: a symlink") for p in verify_digest(folder, read_metadata(folder)))


@pytest.mark.e2e
def test_get_kernel_from_the_cache_ignores_a_planted_pyc(built, tmp_path):
    folder = hub_cache(built, tmp_path)
    plant_pyc(folder, "layers", "EVIL = True\n" + (built / "layers.py").read_text())
    result = get(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "clean"


@pytest.mark.e2e
def test_get_kernel_with_a_lock_does_not_hang_on_a_fifo_blob(built, tmp_path):
    from kernel_builder.runtime.lockfile import local_variant_hash

    folder = hub_cache(built, tmp_path)
    lock = tmp_path / "kernels.lock"
    lock.write_text(json.dumps([{"repo_id": "acme/relu", "sha": SHA, "variants": {
        VARIANT: {"hash": local_variant_hash(folder), "hash_type": "git_lfs_concat"}}}]))
    assert get(tmp_path, lock).stdout.strip() == "clean"
    fifo = tmp_path / "kernels--acme--relu" / "blobs" / ("f" * 64)
    os.mkfifo(fifo)
    (folder / "zeros.bin").symlink_to(fifo)
    line = one_line_error(get(tmp_path, lock))
    assert "zeros.bin: a symlink" in line and "Nothing was imported" in line


# -- 3. metadata fields used in paths and module names --------------------------------------
def rewrite_metadata(variant: Path, **changes) -> None:
    metadata = json.loads((variant / "metadata.json").read_text())
    metadata.update(changes)
    (variant / "metadata.json").write_text(json.dumps(metadata))


@pytest.mark.e2e
def test_a_name_leaving_the_folder_is_refused(variant, tmp_path):
    # The nested-package fallback would import <variant>/../../evil/__init__.py.
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / "__init__.py").write_text("EVIL = True\n")
    rewrite_metadata(variant, name="../../evil")
    line = one_line_error(load(variant))
    assert "'name' must be a kernel name" in line and "'../../evil'" in line


@pytest.mark.e2e
def test_an_id_that_is_not_an_identifier_is_refused(variant):
    rewrite_metadata(variant, id="../x")
    assert "'id' must be a Python identifier" in one_line_error(load(variant))


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["relu", "flash-attn2", "re--lu", "ab", "a", "Relu", "relu_x", "relu-", "1relu", "../x", "relu\n"])
def test_kernel_names_are_accepted_as_kernels_accepts_them(variant, name):
    from kernels._rust import KernelName

    try:
        KernelName(name)
        theirs = True
    except ValueError:
        theirs = False
    rewrite_metadata(variant, name=name)
    try:
        read_metadata(variant)
        ours = True
    except KernelLoadError as e:
        assert "\n" not in e.message.replace(repr(name), "")
        ours = False
    assert ours == theirs


# -- 4. trust_remote_code ----------------------------------------------------------------------
@pytest.mark.parametrize("value", [{"evilorg": False}, {"evilorg": True}, 1, 0, "evilorg", b"evilorg", [1], object()])
def test_trust_remote_code_takes_only_its_documented_forms(value):
    with pytest.raises(KernelLoadError, match="trust_remote_code must be True, False or a list") as e:
        check_trust("evilorg/relu", value)
    assert not isinstance(e.value, UntrustedKernelError) and "\n" not in e.value.message


def test_trust_remote_code_documented_forms():
    check_trust("evilorg/relu", True)
    check_trust("evilorg/relu", ["evilorg"])
    check_trust("evilorg/relu", ("EvilOrg/Relu",))
    check_trust("evilorg/relu", {"evilorg"})
    for refused in (False, None, [], ["other"]):
        with pytest.raises(UntrustedKernelError):
            check_trust("evilorg/relu", refused)


def test_get_kernel_refuses_a_dict_before_any_request(tmp_path):
    with pytest.raises(KernelLoadError, match="trust_remote_code must be"):
        get_kernel("evilorg/relu", version=1, trust_remote_code={"evilorg": False},
                   cache_dir=tmp_path, endpoint="http://127.0.0.1:9")


# -- 5. bounded JSON ------------------------------------------------------------------------------
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.e2e
def test_deep_or_non_utf8_metadata_is_one_line(variant):
    metadata = variant / "metadata.json"
    metadata.write_text(DEEP)
    line = one_line_error(load(variant))
    assert str(metadata) in line and f"at most {MAX_JSON_DEPTH}" in line
    metadata.write_bytes(b'{"name": "\xff"}')
    line = one_line_error(load(variant))
    assert str(metadata) in line and "not UTF-8" in line


@pytest.mark.e2e
def test_brackets_inside_strings_do_not_count(variant):
    rewrite_metadata(variant, license="[" * 1000 + '\\"{')
    assert read_metadata(variant)["license"].startswith("[[[")


def test_deep_or_non_utf8_lock_file_is_one_line(tmp_path):
    from kernel_builder.runtime.lockfile import LockfileError, read_lockfile

    lock = tmp_path / "kernels.lock"
    for content in (DEEP.encode(), b"[\xfe]"):
        lock.write_bytes(content)
        with pytest.raises(LockfileError) as e:
            read_lockfile(lock)
        assert str(lock) in e.value.message and "\n" not in e.value.message


def test_deep_cache_record_is_ignored(tmp_path, caplog):
    from kernel_builder.runtime.hub import STATE_FILE, _RepoCache

    cache = _RepoCache(tmp_path, "acme/relu", "kernel")
    cache.folder.mkdir(parents=True)
    (cache.folder / STATE_FILE).write_text('{"format": 1, "refs": ' + DEEP + "}")
    assert cache.load() == {}
    assert "nests JSON" in caplog.text
    (cache.folder / STATE_FILE).write_bytes(b"\xff\xfe")
    assert cache.refs() is None
