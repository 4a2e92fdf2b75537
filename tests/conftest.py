"""Shared fixtures: every test gets its own kbuild cache, so runs never see each other's
probed environments or CMake work trees."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path_factory.mktemp("kbuild-cache")))


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    """A cache shared by the slow end-to-end builds of one session."""
    return tmp_path_factory.mktemp("kbuild-shared-cache")


def kbuild(*args: str, cwd: Path | None = None, env: dict | None = None, check: bool = False) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess, as a user would."""
    full_env = dict(os.environ, **(env or {}))
    result = subprocess.run(
        [sys.executable, "-m", "kernel_builder.cli", *args],
        cwd=cwd, env=full_env, capture_output=True, text=True, check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kbuild {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def copy_example(name: str, dest: Path) -> Path:
    target = dest / name
    shutil.copytree(EXAMPLES / name, target, ignore=shutil.ignore_patterns("build", "__pycache__"))
    return target
