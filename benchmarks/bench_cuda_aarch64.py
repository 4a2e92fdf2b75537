"""The aarch64 CUDA variant cross-built on x86_64 against the native x86_64 build of the
same kernel (issue 33), measured in one run side by side:

1. a cold native build of examples/swiglu, torch214-cxx11-cu130-x86_64-linux, without the
   import check (compiling only);
2. a cold cross build of the same kernel, torch214-cxx11-cu130-aarch64-linux, also without;
3. the same cross build with the import check, which runs under qemu's emulation.

Each figure is wall seconds and the CPU seconds of kbuild and everything it ran (the
steadier figure on a shared machine).

All three compile SASS for 9.0, 10.0 and 12.1 (GH200, GB200, GB10), each from a fresh copy
and an empty kbuild cache (work trees), with build environments already in the store (the
first cross build downloads about 4.6 GB: see docs/guides/cuda-toolkits.md).

Usage: python benchmarks/bench_cuda_aarch64.py   (needs nvcc 13.0, aarch64-linux-gnu-g++, qemu-user-static)
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kernel_builder.environments.store import envs_root

REPO = Path(__file__).resolve().parents[1]
ARCHS = "9.0,10.0,12.1"
RUNS = (
    ("native x86_64", "torch214-cxx11-cu130-x86_64-linux", ("--no-import-check",)),
    ("cross aarch64", "torch214-cxx11-cu130-aarch64-linux", ("--no-import-check",)),
    ("cross aarch64 + emulated import check", "torch214-cxx11-cu130-aarch64-linux", ()),
)


def cold_build(work: Path, label: str, variant: str, extra: tuple[str, ...]) -> tuple[float, float]:
    """One `kbuild build` of a fresh copy with its own kbuild cache; its wall and CPU seconds."""
    root = work / label.replace(" ", "-").replace("+", "") / "swiglu"
    shutil.copytree(REPO / "examples" / "swiglu", root, ignore=shutil.ignore_patterns("build", "__pycache__"))
    # A fresh cache for work trees, the store's environments as they are (GBs each).
    env = dict(os.environ, KBUILD_CACHE_DIR=str(root.parent / "cache"), KBUILD_ENVS_DIR=str(envs_root()))
    command = [sys.executable, "-m", "kernel_builder.cli", "build", str(root), "--variant", variant,
               "--cuda-arch", ARCHS, "--no-compiler-cache", *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return time.perf_counter() - start, cpu


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="kbuild-bench-cuda-aarch64-"))
    figures = {}
    for label, variant, extra in RUNS:
        figures[label] = cold_build(work, label, variant, extra)
        wall, cpu = figures[label]
        print(f"cold build of swiglu ({ARCHS}), {label:38}: {wall:8.1f} s wall, {cpu:8.1f} s CPU")
    (native_wall, native_cpu), (cross_wall, cross_cpu) = figures["native x86_64"], figures["cross aarch64"]
    print(f"cross / native build:                {cross_wall / native_wall:8.2f}x wall, {cross_cpu / native_cpu:.2f}x CPU")
    emulated = figures["cross aarch64 + emulated import check"][0] - cross_wall
    print(f"emulated import check adds:          {emulated:8.1f} s wall")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
