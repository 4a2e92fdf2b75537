"""Where kbuild keeps things: its cache (probed environments, CMake work trees, logs) and the
files it ships (templates, inside the wheel or beside the package in a checkout).

`KBUILD_CACHE_DIR` overrides the cache's location (tests give each run its own);
kernel_builder.settings reads it."""

from __future__ import annotations

import hashlib
from pathlib import Path

from kernel_builder.settings import read_environment

_PACKAGE = Path(__file__).resolve().parent


def cache_dir(*parts: str) -> Path:
    environment = read_environment()
    root = environment.cache_dir or (environment.xdg_cache_home or Path.home() / ".cache") / "kbuild"
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def short_key(text: str, length: int = 16) -> str:
    """A stable, filesystem-safe key for a path or other text."""
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def templates_dir(*parts: str) -> Path:
    """`templates/<parts>`: packaged as kernel_builder/templates in a wheel, top-level in a checkout."""
    for base in (_PACKAGE / "templates", _PACKAGE.parent / "templates"):
        if base.is_dir():
            return base.joinpath(*parts)
    raise FileNotFoundError("kbuild's templates folder is missing; reinstall kbuild")
