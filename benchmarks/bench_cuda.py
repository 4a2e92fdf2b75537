"""CUDA build and build-environment figures, measured in one run side by side:

1. creating the managed CUDA build environment (torch 2.14 cu130) in an empty store, then
   finding it again (`kbuild env create`, what `kbuild build` does before a CUDA job);
2. a cold CUDA build of examples/swiglu as written (sm_80 + sm_90), and the same kernel
   with one architecture (sm_80), each from a fresh copy and an empty kbuild cache;
3. a no-op rebuild of the CUDA variant.

Usage: python benchmarks/bench_cuda.py [--keep-env]  (needs nvcc 13; about 5 GB of disk)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VARIANT = "torch214-cxx11-cu130-x86_64-linux"


def timed(cmd: list[str], env: dict) -> float:
    start = time.perf_counter()
    result = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{result.stderr[-2000:]}")
    return time.perf_counter() - start


def kbuild(*args: str) -> list[str]:
    return [sys.executable, "-m", "kernel_builder.cli", *args]


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="kbuild-bench-cuda-"))
    env = dict(os.environ, KBUILD_ENVS_DIR=str(work / "envs"))
    cold_env = timed(kbuild("env", "create", "torch214-cu130"), env)
    warm_env = timed(kbuild("env", "create", "torch214-cu130"), env)
    print(f"build environment torch214-cu130, created:  {cold_env:8.2f} s")
    print(f"build environment torch214-cu130, reused:   {warm_env:8.2f} s   ({cold_env / warm_env:,.0f}x)")

    figures = {}
    for label, capabilities in (("sm_80 + sm_90", '["8.0", "9.0"]'), ("sm_80 only", '["8.0"]')):
        root = work / label.replace(" ", "").replace("+", "_") / "swiglu"
        shutil.copytree(REPO / "examples" / "swiglu", root, ignore=shutil.ignore_patterns("build", "__pycache__"))
        toml = root / "build.toml"
        toml.write_text(toml.read_text().replace('cuda-capabilities = ["8.0", "9.0"]', f"cuda-capabilities = {capabilities}"))
        job_env = dict(env, KBUILD_CACHE_DIR=str(root.parent / "cache"))
        command = kbuild("build", str(root), "--variant", VARIANT)
        figures[label] = timed(command, job_env)
        print(f"cold CUDA build of swiglu, {label:14}: {figures[label]:8.2f} s")
        if label == "sm_80 only":
            noop = timed(command, job_env)
            print(f"no-op rebuild of the CUDA variant:          {noop:8.2f} s")
    print(f"two architectures / one:                    {figures['sm_80 + sm_90'] / figures['sm_80 only']:8.2f}x")
    if "--keep-env" not in sys.argv:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
