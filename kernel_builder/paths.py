"""Where kbuild keeps things: its cache (probed environments, CMake work trees, logs) and the
files it ships (templates/ and docker/: inside the wheel, or beside the package in a checkout).

`KBUILD_CACHE_DIR` overrides the cache's location (tests give each run its own);
kernel_builder.settings reads it."""

from __future__ import annotations

import hashlib
from pathlib import Path

from kernel_builder.errors import KbuildError
from kernel_builder.settings import read_environment

# The installed package, and the folder above it: a kbuild checkout (with .git, pyproject.toml,
# templates/ and docker/) when kbuild runs from source.
PACKAGE_DIR = Path(__file__).resolve().parent
CHECKOUT_DIR = PACKAGE_DIR.parent


def cache_dir(*parts: str) -> Path:
    environment = read_environment()
    root = environment.cache_dir or (environment.xdg_cache_home or Path.home() / ".cache") / "kbuild"
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def short_key(text: str, length: int = 16) -> str:
    """A stable, filesystem-safe key for a path or other text."""
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def _shipped(folder: str, marker: str, what: str) -> Path:
    """`folder`, packaged as kernel_builder/<folder> in a wheel, top-level in a checkout."""
    for base in (PACKAGE_DIR / folder, CHECKOUT_DIR / folder):
        if (base / marker).exists():
            return base
    raise KbuildError(f"kbuild's {folder}/ folder ({what}) is missing; reinstall kbuild")


def templates_dir(*parts: str) -> Path:
    return _shipped("templates", "build", "the templates it renders").joinpath(*parts)


def docker_dir(*parts: str) -> Path:
    return _shipped("docker", "Dockerfile.cpu", "the build images' Dockerfiles").joinpath(*parts)
