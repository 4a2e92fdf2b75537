"""The output cache's store (kernel_builder.assemble.output_cache), against a real local folder
through fsspec: a verified entry is installed, and every kind of bad entry (another id,
another variant, a tampered, missing or extra file, a truncated or foreign archive, a link,
a path out of the folder) is a miss with a warning that leaves nothing installed. An upload
that fails half-way leaves no entry a reader could take. In-process, no compile."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import fsspec
import pytest

from kernel_builder.assemble.output_cache import OutputCache, OutputCacheError, output_cache_for, pack_entry
from kernel_builder.errors import UsageError
from kernel_builder.runtime.digest import hash_variant, verify_digest
from kernel_builder.runtime.loader import STAGING_PREFIX

VARIANT = "torch213-cxx11-cpu-x86_64-linux"
ID = "ab" * 32
OTHER_ID = "cd" * 32


def make_variant(folder: Path, input_id: str = ID, variant: str = VARIANT) -> Path:
    """A variant folder as a build stamps it: files, a digest of them, kbuild's input id."""
    (folder / "sub").mkdir(parents=True)
    (folder / "__init__.py").write_text("from ._ops import ops\n")
    (folder / "_ops.py").write_text("ops = None\n")
    (folder / "sub" / "layers.py").write_text("class Layer: pass\n")
    (folder / "_relu_cpu_abc1234.abi3.so").write_bytes(bytes(range(256)) * 64)
    metadata = {"id": "_relu_cpu_abc1234", "digest": {"algorithm": "sha256", "files": hash_variant(folder)},
                "kbuild": {"input-hash": input_id, "variant": variant}}
    (folder / "metadata.json").write_text(json.dumps(metadata))
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "_ops.cpython-311.pyc").write_bytes(b"not part of the build")
    return folder


@pytest.fixture
def store(tmp_path) -> OutputCache:
    return OutputCache(str(tmp_path / "store"))


@pytest.fixture
def built(tmp_path) -> Path:
    return make_variant(tmp_path / "first" / VARIANT)


def fetch(cache: OutputCache, dest: Path, input_id: str = ID) -> tuple[bool, list[str]]:
    warnings: list[str] = []
    return cache.fetch(input_id, dest, warn=warnings.append), warnings


def entry_path(cache: OutputCache, input_id: str = ID) -> Path:
    return Path(cache.entry(input_id))


def rewrite_entry(cache: OutputCache, change, input_id: str = ID) -> None:
    """Replace the stored entry by one whose members `change(name, bytes)` rewrites
    (None drops a member); `change` may also return extra (name, bytes) pairs under key None."""
    path = entry_path(cache, input_id)
    with tarfile.open(path) as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()]
    with tarfile.open(path, "w") as tar:
        for name, data in members + change(None, None):
            data = data if name is None else change(name, data)
            if data is None:
                continue
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def keep(name, data):
    return [] if name is None else data


def test_an_entry_round_trips_and_verifies(store, built, tmp_path):
    assert store.store(ID, built) is True
    dest = tmp_path / "second" / VARIANT
    hit, warnings = fetch(store, dest)
    assert hit and warnings == []
    metadata = json.loads((dest / "metadata.json").read_text())
    assert verify_digest(dest, metadata) == []
    assert not (dest / "__pycache__").exists(), "bytecode is not part of an entry"
    assert (dest / "sub" / "layers.py").read_text() == "class Layer: pass\n"
    assert not any(p.name.startswith(STAGING_PREFIX) for p in dest.parent.iterdir())
    assert store.store(ID, built) is False, "an entry already there is not uploaded again"
    assert store.entry_count() == 1


def test_equal_builds_pack_to_equal_bytes(built, tmp_path):
    first = pack_entry(built, tmp_path / "a.tar").read_bytes()
    (built / "_ops.py").touch()  # a newer mtime, the same bytes
    assert pack_entry(built, tmp_path / "b.tar").read_bytes() == first


def test_a_missing_entry_is_a_plain_miss(store, tmp_path):
    hit, warnings = fetch(store, tmp_path / "out" / VARIANT)
    assert not hit and warnings == []
    assert not (tmp_path / "out" / VARIANT).exists()


def test_a_hit_replaces_an_older_variant_whole(store, built, tmp_path):
    store.store(ID, built)
    dest = tmp_path / "second" / VARIANT
    make_variant(dest, input_id=OTHER_ID)
    (dest / "stale.py").write_text("")
    assert fetch(store, dest)[0]
    assert not (dest / "stale.py").exists()
    assert json.loads((dest / "metadata.json").read_text())["kbuild"]["input-hash"] == ID


def tampered(name, data):
    return [] if name is None else (b"ops = 'evil'\n" if name == "_ops.py" else data)


def truncated_entry(cache: OutputCache) -> None:
    path = entry_path(cache)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def another_ids_entry(cache: OutputCache) -> None:
    """The entry of OTHER_ID stored under ID (copied by hand, or a store that mixed them up)."""
    shutil.copy(entry_path(cache, OTHER_ID), entry_path(cache))


CORRUPTIONS = {
    "tampered file": (lambda c: rewrite_entry(c, tampered), "_ops.py: hash mismatch"),
    "missing file": (lambda c: rewrite_entry(c, lambda n, d: [] if n is None else (None if n == "_ops.py" else d)),
                     "_ops.py: missing file"),
    "extra file": (lambda c: rewrite_entry(c, lambda n, d: [("planted.py", b"import os\n")] if n is None else d),
                   "planted.py: unknown file"),
    "no metadata.json": (lambda c: rewrite_entry(c, lambda n, d: [] if n is None else (None if n == "metadata.json" else d)),
                         "metadata.json"),
    "truncated": (truncated_entry, ""),  # cut mid-member: unreadable, or a file missing
    "not an archive": (lambda c: entry_path(c).write_bytes(b"<html>404</html>"), "unreadable entry"),
    "empty file": (lambda c: entry_path(c).write_bytes(b""), ""),
    "another input id": (another_ids_entry, "another input id"),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_a_corrupt_entry_is_a_miss_with_a_warning(case, store, built, tmp_path):
    store.store(ID, built)
    store.store(OTHER_ID, make_variant(tmp_path / "other" / VARIANT, input_id=OTHER_ID))
    corrupt, expected = CORRUPTIONS[case]
    corrupt(store)
    dest = tmp_path / "second" / VARIANT
    hit, warnings = fetch(store, dest)
    assert not hit and len(warnings) == 1, warnings
    assert warnings[0].startswith(f"output cache entry {ID} refused (") and expected in warnings[0], warnings[0]
    assert warnings[0].endswith("; building")
    assert not dest.exists()
    assert list(dest.parent.iterdir()) == [] if dest.parent.exists() else True, "no staging folder left behind"


def test_an_entry_of_another_variant_is_refused(store, tmp_path):
    other = make_variant(tmp_path / "first" / "torch214-cxx11-cpu-x86_64-linux", variant="torch214-cxx11-cpu-x86_64-linux")
    store.store(ID, other)
    hit, warnings = fetch(store, tmp_path / "second" / VARIANT)
    assert not hit and "holds variant torch214-cxx11-cpu-x86_64-linux" in warnings[0]


def _planted_member(cache: OutputCache, info: tarfile.TarInfo) -> None:
    path = entry_path(cache)
    with tarfile.open(path, "a") as tar:
        tar.addfile(info, io.BytesIO(b"x") if info.isfile() else None)


def test_a_link_in_an_entry_is_refused(store, built, tmp_path):
    store.store(ID, built)
    link = tarfile.TarInfo("layers.py")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    _planted_member(store, link)
    hit, warnings = fetch(store, tmp_path / "second" / VARIANT)
    assert not hit and "layers.py: not a regular file or folder" in warnings[0]


def test_a_path_out_of_the_folder_is_refused(store, built, tmp_path):
    store.store(ID, built)
    escape = tarfile.TarInfo("../escaped.py")
    escape.size = 1
    _planted_member(store, escape)
    hit, warnings = fetch(store, tmp_path / "second" / VARIANT)
    assert not hit and "unreadable entry" in warnings[0]
    assert not (tmp_path / "second" / "escaped.py").exists()


def test_read_mode_never_uploads(tmp_path, built):
    cache = OutputCache(str(tmp_path / "store"), mode="read")
    assert not cache.writable and cache.store(ID, built) is False
    assert not (tmp_path / "store").exists()
    assert "read-only" in cache.describe()


def test_a_failed_upload_leaves_no_entry(store, built, tmp_path, monkeypatch):
    """A reader never sees a half-written entry: the bytes go to a temporary name first."""
    local = fsspec.filesystem("file")

    def half_then_fail(self, lpath, rpath, **kwargs):
        Path(rpath).write_bytes(Path(lpath).read_bytes()[:100])
        assert not entry_path(store).exists(), "the entry name appeared before the upload finished"
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(type(local), "put_file", half_then_fail)
    with pytest.raises(OutputCacheError, match="cannot upload to the output cache .*No space left on device"):
        store.store(ID, built)
    assert not entry_path(store).exists()
    assert list((tmp_path / "store" / ".incoming").iterdir()) == []
    assert fetch(store, tmp_path / "second" / VARIANT) == (False, [])


def test_a_file_url_and_a_path_are_the_same_store(tmp_path, built):
    OutputCache(f"file://{tmp_path / 'store'}").store(ID, built)
    assert fetch(OutputCache(str(tmp_path / "store")), tmp_path / "second" / VARIANT)[0]


def test_a_store_that_does_not_answer_is_a_miss_with_a_warning(store, built, tmp_path, monkeypatch):
    store.store(ID, built)

    def timeout(self, rpath, lpath, **kwargs):  # a remote store's network failure, which no folder gives
        raise TimeoutError("read timed out")

    monkeypatch.setattr(type(fsspec.filesystem("file")), "get_file", timeout)
    hit, warnings = fetch(store, tmp_path / "second" / VARIANT)
    assert not hit and warnings == [f"cannot download {store.url} entry {ID}: read timed out; building"]


def test_an_unknown_store_or_mode_is_a_one_line_usage_error(monkeypatch):
    with pytest.raises(UsageError, match="fsspec knows no store 'nope://'"):
        OutputCache("nope://bucket/kernels")
    with pytest.raises(UsageError, match="--output-cache-mode must be one of readwrite, read"):
        OutputCache("/tmp/store", mode="write")
    monkeypatch.setenv("KBUILD_OUTPUT_CACHE", "/tmp/store")
    monkeypatch.setenv("KBUILD_OUTPUT_CACHE_MODE", "sometimes")
    with pytest.raises(UsageError, match="KBUILD_OUTPUT_CACHE_MODE must be one of readwrite, read"):
        output_cache_for()


def test_a_missing_backend_names_the_extra(monkeypatch):
    def missing(protocol):
        raise ImportError(f"Install s3fs to access {protocol}")

    monkeypatch.setattr(fsspec, "get_filesystem_class", missing)
    with pytest.raises(UsageError, match=r"--output-cache s3://bucket/k needs s3fs: pip install 'kbuild\[cache-s3\]'"):
        OutputCache("s3://bucket/k")


def test_the_environment_names_the_store_and_the_flag_wins(monkeypatch, tmp_path):
    monkeypatch.delenv("KBUILD_OUTPUT_CACHE", raising=False)
    monkeypatch.delenv("KBUILD_OUTPUT_CACHE_MODE", raising=False)
    assert output_cache_for() is None
    monkeypatch.setenv("KBUILD_OUTPUT_CACHE", str(tmp_path / "env"))
    monkeypatch.setenv("KBUILD_OUTPUT_CACHE_MODE", "read")
    assert output_cache_for() == OutputCache(str(tmp_path / "env"), "read")
    assert output_cache_for(str(tmp_path / "flag"), "readwrite") == OutputCache(str(tmp_path / "flag"), "readwrite")


def test_a_bad_mode_flag_fails_before_any_work():
    from kernel_builder.pipeline.options import BuildOptions

    with pytest.raises(UsageError, match="--output-cache-mode must be one of readwrite, read, got 'write'"):
        BuildOptions(output_cache="/tmp/store", output_cache_mode="write")
