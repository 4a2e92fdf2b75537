"""Where kbuild keeps what it can rebuild: probed environments, CMake work trees, logs.

`KBUILD_CACHE_DIR` overrides the location (tests give each run its own)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    base = os.environ.get("KBUILD_CACHE_DIR")
    if base:
        root = Path(base)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = (Path(xdg) if xdg else Path.home() / ".cache") / "kbuild"
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def short_key(text: str, length: int = 16) -> str:
    """A stable, filesystem-safe key for a path or other text."""
    return hashlib.sha256(text.encode()).hexdigest()[:length]
