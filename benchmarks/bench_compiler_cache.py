"""Compiler cache figures: a CPU build of examples/relu with an empty compiler cache
against the same build in a fresh kbuild work tree with a warm one (issue 5: warm >= 5x
faster than cold).

Both builds start from a fresh kbuild cache (KBUILD_CACHE_DIR: work trees) and a fresh
output folder, so Ninja compiles everything both times; only CCACHE_DIR is shared.

Usage: python benchmarks/bench_compiler_cache.py [EXAMPLE]   (default: relu)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def build(root: Path, variant: str, work: Path, run: str, ccache_dir: Path) -> tuple[float, dict]:
    """One `kbuild build` with its own kbuild cache and output; (wall seconds, its JSON row)."""
    env = dict(os.environ, KBUILD_CACHE_DIR=str(work / run / "cache"), CCACHE_DIR=str(ccache_dir))
    command = [sys.executable, "-m", "kernel_builder.cli", "build", str(root), "--variant", variant,
               "--out", str(work / run / "out"), "--compiler-cache", "--json"]
    start = time.perf_counter()
    result = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    (row,) = json.loads(result.stdout)["jobs"]
    return time.perf_counter() - start, row


def main() -> None:
    import torch

    example = sys.argv[1] if len(sys.argv) > 1 else "relu"
    variant = "torch{}{}-cxx11-cpu-x86_64-linux".format(*torch.__version__.split(".")[:2])
    work = Path(tempfile.mkdtemp(prefix="kbuild-bench-ccache-"))
    root = work / example
    shutil.copytree(REPO / "examples" / example, root, ignore=shutil.ignore_patterns("build", "__pycache__"))
    ccache_dir = work / "ccache"  # empty: the first build is cold
    cold, cold_row = build(root, variant, work, "cold", ccache_dir)
    warm, warm_row = build(root, variant, work, "warm", ccache_dir)

    def hits(row: dict) -> str:
        stats = row["compiler_cache"]
        return f"{stats['hits']}/{stats['hits'] + stats['misses']} hits" if stats else "no compiler cache"

    print(f"examples/{example} {variant}, fresh work tree each time:")
    print(f"  cold (empty ccache): {cold:8.2f} s   ({hits(cold_row)})")
    print(f"  warm (same ccache):  {warm:8.2f} s   ({hits(warm_row)})")
    print(f"  warm is {cold / warm:.1f}x faster than cold (target >= 5x)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
