"""The `zip` build layout (build.toml edition 6, `[general] build-layout = "zip"`), as the
`kernels` runtime (>= 0.19.1) defines it: metadata.json says `"build-layout": "zip"`, the
package's Python files are the members of `<variant>/<metadata id>.zip` (`__init__.py` at its
root), and what cannot be imported from an archive (the native library) lies beside it.

The package is imported under its metadata id with `__path__ = [<variant>, <archive>]`, as
in `kernels`; kbuild's loader serves its modules from the archive's checked bytes
(kernel_builder.runtime.verified_import). The archive is one file of the variant, so the
digest covers it whole.
"""

from __future__ import annotations

import zipfile
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


class ArchiveResources(TraversableResources):
    """`importlib.resources.files(package)`: the archive's members."""

    def __init__(self, archive: Path):
        self._archive = archive

    def files(self):
        return zipfile.Path(self._archive)
