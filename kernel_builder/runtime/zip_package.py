"""The `zip` build layout (build.toml edition 6, `[general] build-layout = "zip"`), as the
`kernels` runtime (>= 0.19.1) defines it: metadata.json says `"build-layout": "zip"`, the
package's Python files are the members of `<variant>/<metadata id>.zip` (`__init__.py` at its
root), and what cannot be imported from an archive (the native library) lies beside it.

The package is imported under its metadata id with `__path__ = [<variant>, <archive>]`, so
`from ._ops import ops` and `from . import layers` come out of the archive through Python's
own zip importer. The archive is one file of the variant, so the digest covers it whole.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import zipfile
from importlib.machinery import ModuleSpec
from pathlib import Path

try:
    from importlib.resources.abc import TraversableResources
except ImportError:  # Python 3.10
    from importlib.abc import TraversableResources

FILES, ZIP = "files", "zip"
LAYOUTS = (FILES, ZIP)
INIT = "__init__.py"


def layout_of(metadata: dict) -> str:
    """metadata.json's `build-layout`; variants written before the key existed are `files`."""
    return metadata.get("build-layout", FILES)


def archive_path(folder: Path, module_id: str) -> Path:
    return Path(folder) / f"{module_id}.zip"


class _ArchiveResources(TraversableResources):
    """`importlib.resources.files(package)`: the archive's members."""

    def __init__(self, archive: Path):
        self._archive = archive

    def files(self):
        return zipfile.Path(self._archive)


class _ArchiveInitLoader(importlib.abc.SourceLoader):
    """Runs the package's `__init__.py` from the archive. SourceLoader without path_stats
    writes no bytecode: nothing may appear in a hashed variant folder."""

    def __init__(self, archive: Path):
        self._archive = archive

    def get_filename(self, fullname: str) -> str:
        return os.path.join(self._archive, INIT)

    def get_data(self, path: str) -> bytes:
        member = Path(os.path.relpath(path, self._archive)).as_posix()
        with zipfile.ZipFile(self._archive) as archive:
            return archive.read(member)

    def is_package(self, fullname: str) -> bool:
        return True

    def get_resource_reader(self, fullname: str) -> _ArchiveResources:
        return _ArchiveResources(self._archive)


def package_spec(folder: Path, module_id: str) -> ModuleSpec:
    """The spec of the package in `folder`'s archive, to import as `module_id`. The variant
    folder comes first on `__path__`, as in `kernels`, so both loaders resolve submodules alike."""
    archive = archive_path(folder, module_id)
    spec = importlib.util.spec_from_file_location(
        module_id,
        os.path.join(archive, INIT),
        loader=_ArchiveInitLoader(archive),
        submodule_search_locations=[str(folder), str(archive)],
    )
    assert spec is not None  # a loader is given, so there is always a spec
    return spec
