"""`load_local`: find this machine's variant folder, verify its digests, import it as a
package under its unique id (so relative imports work and two builds can coexist)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

from kernel_builder.errors import KbuildError
from kernel_builder.runtime.digest import verify_digest
from kernel_builder.runtime.select import select_variant
from kernel_builder.runtime.system import detect_system

REQUIRED_KEYS = ("id", "name", "version", "license", "python-depends", "backend", "digest", "provenance")
_loaded: dict[Path, ModuleType] = {}


class KernelLoadError(KbuildError):
    """No variant fits this machine, or the chosen one is incomplete."""


class DigestMismatchError(KernelLoadError):
    """A variant folder's files do not match the digests in its metadata.json."""


def find_variant(path: Path | str, backend: str | None = None) -> Path:
    """The variant folder to load from a repo root, a build/ folder or a variant folder."""
    path = Path(path)
    if (path / "metadata.json").is_file():
        return path
    system = detect_system(backend)
    lines = []
    for base in (path, path / "build"):
        if not base.is_dir():
            continue
        names = [p.name for p in base.iterdir() if p.is_dir()]
        best, trace = select_variant(names, system)
        if best is not None:
            return base / best.name
        lines += [f"{d.variant.name}: {d.reason}" for d in trace]
    found = "; ".join(lines) if lines else "no variant folders found"
    raise KernelLoadError(f"no build variant in {path} fits this machine ({system.describe()}): {found}")


def read_metadata(folder: Path) -> dict:
    file = folder / "metadata.json"
    try:
        metadata = json.loads(file.read_text())
    except (OSError, ValueError) as e:
        raise KernelLoadError(f"{file}: cannot read metadata ({e})") from None
    missing = [k for k in REQUIRED_KEYS if k not in metadata]
    if missing:
        raise KernelLoadError(f"{file}: missing required key {missing[0]!r}; rebuild the kernel")
    return metadata


def load_local(path: Path | str, *, backend: str | None = None, verify: bool = True) -> ModuleType:
    """Load the best variant of a local kernel build for this machine and return its module."""
    folder = find_variant(path, backend).resolve()
    if folder in _loaded:
        return _loaded[folder]
    metadata = read_metadata(folder)
    if verify:
        problems = verify_digest(folder, metadata)
        if problems:
            raise DigestMismatchError(
                f"{folder}: files do not match metadata.json ({'; '.join(problems[:5])}); "
                "the build folder was modified or corrupted: rebuild or download it again"
            )
    module_id = metadata["id"]
    spec = importlib.util.spec_from_file_location(
        module_id, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    if spec is None or spec.loader is None:
        raise KernelLoadError(f"{folder}: no __init__.py to import")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_id] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as e:
        sys.modules.pop(module_id, None)
        e.add_note(f"while importing kernel '{metadata['name']}' from {folder}")
        raise
    _loaded[folder] = module
    return module
