"""A job's inputs and their hash: what decides whether a variant must be rebuilt.

The inputs are every file a build reads from the kernel repo: build.toml, kbuild.toml, every
`src` file, every file under an `include` folder and the Python package. They must all
resolve, links followed, inside the repo: `input_files` collects them and refuses a link out
of it (or a name that is not UTF-8) with a one-line ManifestError naming the build.toml key,
before anything is compiled (manifest.py refuses the declared paths themselves). The build
copies the package from the same walk (`package_files`), so the hash covers what it read.

The input hash covers those files, the flags and op namespace, the toolchain versions,
torch's version and kbuild's own build templates. Equal hashes mean the existing output stands.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterable, Iterator

from kernel_builder import __version__
from kernel_builder.errors import ManifestError
from kernel_builder.kernel.fusion import SIDECAR
from kernel_builder.kernel.manifest import Manifest, display_path
from kernel_builder.paths import templates_dir

_SKIP_DIRS = {"__pycache__", ".git"}


def _walk(folder: Path, root: Path, refuse) -> Iterator[Path]:
    """The regular files under `folder`, sorted. Linked files and folders are followed when
    they resolve inside `root` (the compiler and the copy read through them) and refused by
    `refuse(message)` otherwise; FIFOs, devices and broken links are never read, so skipped."""
    seen: set[Path] = set()  # resolved folders: a link loop is walked once

    def walk(current: Path) -> Iterator[Path]:
        real = current.resolve()
        if real in seen:
            return
        seen.add(real)
        try:
            names = sorted(os.listdir(current))
        except OSError as e:
            refuse(f"cannot read '{_rel(current, root)}': {e.strerror}")
        for name in names:
            path = current / name
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                shown = os.fsencode(name).decode("utf-8", "backslashreplace")
                refuse(f"'{_rel(current, root)}' holds a file whose name is not UTF-8 ({shown}); rename it")
            if path.is_symlink():
                target = _target(path)
                if target is None:
                    continue  # a link loop: nothing to read
                if not target.is_relative_to(root):
                    refuse(f"'{_rel(path, root)}' is a link to {target}, outside the kernel repo; copy the file into the repo")
            if name in _SKIP_DIRS:
                continue
            if path.is_dir():
                yield from walk(path)
            elif path.is_file():
                yield path

    return walk(folder)


def _target(link: Path) -> Path | None:
    try:
        return link.resolve()
    except (OSError, RuntimeError):  # Python 3.11 raises RuntimeError for a link loop
        return None


def _rel(path: Path, root: Path) -> str:
    return os.path.relpath(path, root)


def _refuser(manifest: Manifest, where: str):
    def refuse(message: str):
        raise ManifestError(f"{display_path(manifest.path)}: {where}: {message}")

    return refuse


def package_files(manifest: Manifest) -> list[Path]:
    """Every file of the Python package torch-ext/<python_name>/ that a build may copy."""
    where = f"package {_rel(manifest.package_dir, manifest.root)}"
    return list(_walk(manifest.package_dir, manifest.root, _refuser(manifest, where)))


def input_files(manifest: Manifest) -> list[Path]:
    """Every file a build of this kernel reads from the kernel repo, sorted, deduplicated;
    a ManifestError when one resolves outside the repo (see the module doc)."""
    root = manifest.root
    files: set[Path] = {manifest.path}
    sidecar = root / SIDECAR  # kbuild's own declarations (fusion layouts)
    if sidecar.is_symlink() and not (_target(sidecar) or sidecar).is_relative_to(root):
        raise ManifestError(f"{SIDECAR}: a link to {_target(sidecar)}, outside the kernel repo {root}; copy the file into the repo")
    if sidecar.is_file():
        files.add(sidecar)
    framework = manifest.torch if manifest.torch is not None else manifest.other
    sections = ([(manifest.framework, framework)] if framework is not None else []) + [
        (f"kernel.{unit.name}", unit) for unit in manifest.units
    ]
    for section, table in sections:
        files.update(root / p for p in table.src)
        for rel in table.include:
            files.update(_walk(root / rel, root, _refuser(manifest, f"[{section}] include")))
    files.update(package_files(manifest))
    return sorted(files)


def content_hash(root: Path, files: Iterable[Path]) -> str:
    """sha256 over (relative path, file bytes) pairs, the same in any folder: the op namespace
    id (identity.py) and part of the input hash."""
    digest = hashlib.sha256()
    for path in files:
        # relpath, not relative_to: a declared "a/../b.cpp" is inside the repo, yet not lexically under it.
        digest.update(Path(os.path.relpath(path, root)).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def templates_hash() -> str:
    folder = templates_dir("build")
    return content_hash(folder, _walk(folder, folder.resolve(), _templates_broken))


def _templates_broken(message: str):
    raise ManifestError(f"kbuild's build templates: {message}; reinstall kbuild")


def input_hash(manifest: Manifest, *facts: str) -> str:
    """Hash of the kernel's sources plus `facts` (variant, flags, toolchains, torch)."""
    digest = hashlib.sha256()
    digest.update(f"kbuild {__version__}\0templates {templates_hash()}\0".encode())
    for fact in facts:
        digest.update(fact.encode() + b"\0")
    digest.update(content_hash(manifest.root, input_files(manifest)).encode())
    return digest.hexdigest()
