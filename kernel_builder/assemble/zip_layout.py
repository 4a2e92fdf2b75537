"""Writing and reading the package of a `build-layout = "zip"` variant (the format:
kernel_builder.runtime.zip_package).

The archive is deterministic, so a rebuild from the same inputs is byte-identical and keeps
its digest: members sorted by path, one fixed timestamp and mode, stored uncompressed (a
compressor's output may change with the zlib build; the Python files are small beside the
library).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

from kernel_builder.errors import KbuildError
from kernel_builder.runtime.zip_package import ZIP, archive_path, layout_of

# What stays beside the archive: the files the runtime reads from the folder itself.
UNPACKED = ("metadata.json", "symbols.json")
_NATIVE_SUFFIXES = (".so", ".dylib", ".pyd", ".dll")
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the oldest time a zip entry can hold
_MODE = 0o644


class ArchiveError(KbuildError):
    """A zip variant's archive is missing or is not a zip file."""


def _is_native(path: Path) -> bool:
    """A native library: the dynamic loader needs a real file, so it cannot live in the archive."""
    return path.name.endswith(_NATIVE_SUFFIXES) or ".so." in path.name


def pack_package(folder: Path, module_id: str) -> Path:
    """Move the package's files in `folder` (all but the native libraries and UNPACKED) into
    `folder/<module_id>.zip` and return the archive."""
    folder = Path(folder)
    archive = archive_path(folder, module_id)
    members = sorted(
        (path for path in folder.rglob("*") if path.is_file() and not _is_native(path)
         and path.relative_to(folder).as_posix() not in UNPACKED),
        key=lambda path: path.relative_to(folder).as_posix(),
    )
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as out:
        for path in members:
            entry = zipfile.ZipInfo(path.relative_to(folder).as_posix(), date_time=_EPOCH)
            entry.create_system = 3  # unix, so the mode below is what readers see
            entry.external_attr = (0o100000 | _MODE) << 16  # a regular file, rw-r--r--
            out.writestr(entry, path.read_bytes())
    for path in members:
        path.unlink()
    # The package's subfolders (layers/, ...) are empty now unless a native library is in them.
    for path in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(path.iterdir()):
            path.rmdir()
    return archive


@contextlib.contextmanager
def package_files_of(folder: Path, metadata: dict) -> Iterator[Path]:
    """A folder holding the variant's Python files, for reading them as source: the variant
    folder itself, or for the zip layout a temporary copy of its archive's members."""
    if layout_of(metadata) != ZIP:
        yield Path(folder)
        return
    scratch = Path(tempfile.mkdtemp(prefix="kbuild-zip-"))
    archive = archive_path(folder, metadata["id"])
    try:
        try:
            with zipfile.ZipFile(archive) as packed:
                packed.extractall(scratch)
        except (OSError, zipfile.BadZipFile) as e:
            raise ArchiveError(f"cannot read {archive}: {getattr(e, 'strerror', None) or e}; rebuild the kernel") from None
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
