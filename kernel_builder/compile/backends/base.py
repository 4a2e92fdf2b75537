"""The interface every backend implements, and what backends share to find their tools.

A backend answers three questions for a build environment:
- `target(manifest, env)`: which variant it would build here, or why it cannot;
- `toolchain_ids()`: the compilers and versions it uses (part of a job's input hash);
- `compile_spec(job)`: the sources, flags and libraries of the generated CMake project.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kernel_builder.variants import Variant

if TYPE_CHECKING:
    from kernel_builder.compile.cmake import CompileSpec
    from kernel_builder.environments.probe import BuildEnv
    from kernel_builder.kernel.manifest import Manifest
    from kernel_builder.compile.job import BuildJob


@dataclass(frozen=True)
class Unavailable:
    """Why a backend cannot build here: shown as a skip, never as a failure."""

    backend: str
    reason: str


class Backend(Protocol):
    name: str
    macro: str  # the define that binding sources test: CPU_KERNEL, CUDA_KERNEL, ...

    def target(self, manifest: "Manifest | None", env: "BuildEnv") -> Variant | Unavailable: ...

    def toolchain_ids(self) -> tuple[str, ...]: ...

    def metadata(self, job: "BuildJob") -> dict: ...  # extra keys of metadata.json's `backend`

    def compile_spec(self, job: "BuildJob") -> "CompileSpec": ...


@functools.cache
def tool_version(tool: str, flag: str = "--version") -> str | None:
    """First line of `tool --version`, or None if the tool is not on PATH."""
    path = shutil.which(tool)
    if path is None:
        return None
    try:
        out = subprocess.run([path, flag], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (out.stdout or out.stderr).strip().splitlines()
    return f"{path}: {lines[0] if lines else 'unknown version'}"
