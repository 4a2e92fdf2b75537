"""`-fno-gnu-unique` for every GCC that compiles a Linux variant, so two kernels in one process
never share a symbol's state.

GCC gives a function-local static of an inline function (and a template's static data
member) the binding `gnu_unique` (STB_GNU_UNIQUE), which the dynamic linker keeps once per
process whatever RTLD_LOCAL says: two kernels with the same class, loaded side by side,
would count with one counter. With the flag it is an ordinary weak symbol, and a library
loaded RTLD_LOCAL (torch.ops.load_library) binds to its own copy, as kernel-builder's builds
do. Clang (hipcc's, icpx, Apple's) never emits the binding and refuses the flag, so a
compiler gets it only when it accepts it; `kbuild check` fails a library that still exports
one (kernel_builder.checks.variant_checks.check_gnu_unique).
"""

from __future__ import annotations

import functools
import subprocess

FLAG = "-fno-gnu-unique"


@functools.cache
def accepts_flag(compiler: str) -> bool:
    """Whether the C++ compiler at `compiler` takes -fno-gnu-unique (GCC does, clang refuses it)."""
    try:
        done = subprocess.run(
            [compiler, FLAG, "-x", "c++", "-fsyntax-only", "-"], input="", capture_output=True, text=True,
            timeout=60, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False  # CMake reports the compiler that does not run
    return done.returncode == 0


def language_options(languages: tuple[str, ...], cache: dict[str, str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(language, options) for the compilers the project names in `cache`: C++ compiled by
    CMAKE_CXX_COMPILER, and CUDA's host code, which nvcc hands to CMAKE_CUDA_HOST_COMPILER."""
    found = []
    cxx = cache.get("CMAKE_CXX_COMPILER")
    if "CXX" in languages and cxx and accepts_flag(cxx):
        found.append(("CXX", (FLAG,)))
    host = cache.get("CMAKE_CUDA_HOST_COMPILER")
    if "CUDA" in languages and host and accepts_flag(host):
        found.append(("CUDA", (f"-Xcompiler={FLAG}",)))
    return tuple(found)
