"""Keep the `kernels` package's registry of loaded kernels in step with kbuild's loader.

kernels 0.18 and 0.19 remember the metadata of every kernel they import (by kernel id, in
`_loaded_kernel_metadata` of their importer module) and assert it is there when they find
the id already in `sys.modules`. A kernel imported by kbuild first must therefore be
recorded there, or `kernels.get_local_kernel` of the same build fails. kbuild never imports
`kernels` itself: it records into the registry when kernels is already imported, and
otherwise once, right after kernels' importer module is imported later.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
import threading
from pathlib import Path

# Where the registry lives: 0.19 moved the importer under `_internals`; 0.17 has none.
IMPORTER_MODULES = ("kernels._internals.importer", "kernels.importer")
_REGISTRY = "_loaded_kernel_metadata"

_pending: dict[str, Path] = {}  # kernel id -> variant folder, imported by kbuild
_lock = threading.Lock()
_hook: _RecordAfterImport | None = None


def _record(importer, module_id: str, folder: Path) -> None:
    registry = getattr(importer, _REGISTRY, None)
    if not isinstance(registry, dict) or module_id in registry:
        return
    # kernels' own reader, so the recorded object is exactly what kernels compares against.
    metadata_type = importlib.import_module("kernels._rust").Metadata
    registry[module_id] = metadata_type.read_from_file(str(folder / "metadata.json"))


def _record_pending(importer) -> None:
    with _lock:
        items = list(_pending.items())
    for module_id, folder in items:
        _record(importer, module_id, folder)


def record_loaded(module_id: str, folder: Path) -> None:
    """Tell kernels (now, or when it is imported) that kbuild imported `module_id` from `folder`."""
    with _lock:
        _pending[module_id] = folder
    imported = [sys.modules[name] for name in IMPORTER_MODULES if name in sys.modules]
    for importer in imported:
        _record(importer, module_id, folder)
    _install_hook()


def _install_hook() -> None:
    global _hook
    with _lock:
        if _hook is not None:
            return
        _hook = _RecordAfterImport()
        sys.meta_path.insert(0, _hook)


class _RecordAfterImport(importlib.abc.MetaPathFinder):
    """Wraps the loader of kernels' importer module so the pending kernels are recorded once it ran."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in IMPORTER_MODULES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _RecordingLoader(spec.loader)
        return spec


class _RecordingLoader(importlib.abc.Loader):
    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        _record_pending(module)

    def __getattr__(self, name):  # get_source, get_resource_reader, ... of the real loader
        return getattr(self._inner, name)
