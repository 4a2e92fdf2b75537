"""A rendered CMake project's exact command lines, read from Ninja without building: how the
Metal and XPU tests (tests/compile/, tests/examples/) check steps that need a Mac or oneAPI."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kernel_builder.compile.cmake import _tool, render_project
from kernel_builder.errors import KbuildError


def ninja_commands(spec, work_dir: Path) -> list[str]:
    """Render and configure the project with this machine's C++ compiler; Ninja's command
    lines, in the order Ninja would run them."""
    try:
        cmake, ninja = _tool("cmake"), _tool("ninja")
    except KbuildError as e:
        pytest.skip(f"configuring the project needs CMake and Ninja: {e}")
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("configuring the project needs a host C++ compiler (c++ or g++) to stand in")
    render_project(spec, work_dir)
    cache = dict(spec.cache, CMAKE_CXX_COMPILER=compiler)
    subprocess.run(
        [cmake, "-G", "Ninja", "-S", str(work_dir), "-B", str(work_dir / "build"), f"-DCMAKE_MAKE_PROGRAM={ninja}",
         *(f"-D{k}={v}" for k, v in cache.items())],
        check=True, capture_output=True, text=True,
    )
    out = subprocess.run([ninja, "-C", str(work_dir / "build"), "-t", "commands"],
                         check=True, capture_output=True, text=True)
    return out.stdout.splitlines()


def only(lines: list[str], needle: str) -> str:
    """The one line holding `needle` (fails when none or several do)."""
    found = [line for line in lines if needle in line]
    assert len(found) == 1, (needle, lines)
    return found[0]
