"""aarch64 figures (docs/guides/aarch64.md): the cross build of a kernel's aarch64-linux CPU
variant against the native build of its x86_64-linux one, and its own tests under emulation
against the same tests run natively, all in this one invocation.

Each build starts in a fresh kbuild work tree and output folder with the compiler cache off, so
every file compiles; the import check is off for the build timings (it is the emulated import,
timed by the test run). The managed environments (torch 2.14 for x86_64 and for aarch64, the
emulated Python) are made before the timings start, and their creation is not timed.

Usage: python benchmarks/bench_aarch64.py [EXAMPLE]   (default: swiglu)
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TORCH = "torch214-cxx11-cpu"
NATIVE, CROSS = f"{TORCH}-x86_64-linux", f"{TORCH}-aarch64-linux"


def kbuild(*args: str, cache: Path) -> float:
    """Wall seconds of one kbuild command (its kbuild cache `cache`, the caller's environment
    store: GBs that are made once); its failure stops the benchmark."""
    from kernel_builder.environments.store import envs_root

    env = dict(os.environ, KBUILD_CACHE_DIR=str(cache), KBUILD_COMPILER_CACHE="none", KBUILD_ENVS_DIR=str(envs_root()))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kernel_builder.cli", *args], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"kbuild {' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return seconds


def main() -> None:
    example = sys.argv[1] if len(sys.argv) > 1 else "swiglu"
    if platform.machine() != "x86_64":
        sys.exit("this benchmark compares a cross build on x86_64 with the native one: run it on an x86_64 machine")
    with tempfile.TemporaryDirectory(prefix="kbuild-bench-aarch64-") as tmp:
        work = Path(tmp)
        root = Path(shutil.copytree(REPO / "examples" / example, work / example, ignore=shutil.ignore_patterns("build")))
        # Environments and the emulated Python, made (or found) first: not part of any figure.
        kbuild("build", str(root), "--variant", NATIVE, "--variant", CROSS, "--out", str(work / "warm"), cache=work / "warm-cache")
        native = kbuild("build", str(root), "--variant", NATIVE, "--no-import-check", "--out", str(work / "n"), cache=work / "n-cache")
        cross = kbuild("build", str(root), "--variant", CROSS, "--no-import-check", "--out", str(work / "c"), cache=work / "c-cache")
        # `kbuild test` on an up-to-date build: the build step finds it, the rest is the test run.
        kbuild("build", str(root), "--variant", NATIVE, "--variant", CROSS, cache=work / "t-cache")
        native_tests = kbuild("test", str(root), "--variant", NATIVE, cache=work / "t-cache")
        emulated_tests = kbuild("test", str(root), "--variant", CROSS, cache=work / "t-cache")
    print(f"{example}: native x86_64 build {native:.1f} s, cross aarch64 build {cross:.1f} s ({cross / native:.2f}x); "
          f"its tests natively {native_tests:.1f} s, under emulation {emulated_tests:.1f} s ({emulated_tests / native_tests:.1f}x)")


if __name__ == "__main__":
    main()
