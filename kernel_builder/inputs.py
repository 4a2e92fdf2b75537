"""A job's inputs and their hash: what decides whether a variant must be rebuilt.

The input hash covers the declared sources (build.toml, every `src` file and `include`
folder, the Python package), the flags and op namespace, the toolchain versions, torch's
version and kbuild's own build templates. Equal hashes mean the existing output stands.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable

from kernel_builder import __version__
from kernel_builder.fusion import SIDECAR
from kernel_builder.manifest import Manifest
from kernel_builder.resources import templates_dir

_SKIP_DIRS = {"__pycache__", ".git"}


def _walk(folder: Path) -> Iterable[Path]:
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not _SKIP_DIRS.intersection(path.relative_to(folder).parts):
            yield path


def input_files(manifest: Manifest) -> list[Path]:
    """Every file a build of this kernel reads from the kernel repo, sorted, deduplicated."""
    root = manifest.root
    files: set[Path] = {manifest.path}
    sidecar = root / SIDECAR  # kbuild's own declarations (fusion layouts)
    if sidecar.is_file():
        files.add(sidecar)
    declared_dirs: list[str] = []
    if manifest.torch is not None:
        files.update(root / p for p in manifest.torch.src)
        declared_dirs += manifest.torch.include
    for unit in manifest.units:
        files.update(root / p for p in unit.src)
        declared_dirs += unit.include
    for rel in declared_dirs:
        files.update(_walk(root / rel))
    files.update(_walk(manifest.package_dir))
    return sorted(files)


def content_hash(root: Path, files: Iterable[Path]) -> str:
    """sha256 over (relative path, file bytes) pairs: identifies a source tree without git."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def templates_hash() -> str:
    return content_hash(templates_dir("build"), _walk(templates_dir("build")))


def input_hash(manifest: Manifest, *facts: str) -> str:
    """Hash of the kernel's sources plus `facts` (variant, flags, toolchains, torch)."""
    digest = hashlib.sha256()
    digest.update(f"kbuild {__version__}\0templates {templates_hash()}\0".encode())
    for fact in facts:
        digest.update(fact.encode() + b"\0")
    digest.update(content_hash(manifest.root, input_files(manifest)).encode())
    return digest.hexdigest()
