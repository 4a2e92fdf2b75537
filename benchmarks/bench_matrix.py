"""Matrix build figures for issue 5, on examples/swiglu (torch213 cpu, torch214 cpu and
torch214 cu130 here):

1. each variant built alone, cold (empty compiler cache, fresh work trees), one after
   another: the sum of single-job times;
2. the three in one parallel `kbuild build --matrix`, cold: its wall time against (1)
   (target <= 0.65 on 2 cores);
3. the same again at once: every job up to date (target < 1 s);
4. `rm -rf build` and rebuild, work trees kept (Ninja has nothing to compile);
5. `rm -rf build` and fresh work trees, warm compiler cache: every compile goes through
   ccache; against (2) (target >= 5x faster), with the cache hit rate.

Managed build environments are reused (they are not what is measured); make them first
with `kbuild env create torch214-cu130`. Usage: python benchmarks/bench_matrix.py
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
VARIANTS = ("torch213-cxx11-cpu-x86_64-linux", "torch214-cxx11-cpu-x86_64-linux", "torch214-cxx11-cu130-x86_64-linux")


def kbuild_build(root: Path, selection: str, cache: Path, ccache: Path) -> tuple[float, dict]:
    """One `kbuild build --matrix SELECTION --json`; (wall seconds, its report)."""
    from kernel_builder.environments.store import envs_root

    env = dict(os.environ, KBUILD_CACHE_DIR=str(cache), CCACHE_DIR=str(ccache), KBUILD_ENVS_DIR=str(envs_root()))
    command = [sys.executable, "-m", "kernel_builder.cli", "build", str(root), "--matrix", selection, "--json"]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"kbuild build --matrix {selection!r} failed:\n{done.stderr[-3000:]}")
    return seconds, json.loads(done.stdout)


def statuses(report: dict) -> str:
    return ", ".join(f"{n} {s}" for s, n in report["counts"].items() if n)


def hit_rate(report: dict) -> str:
    cache = report["compiler_cache"]
    return f"{cache['hits']}/{cache['compiles']} compiles from {cache['tool']} ({100 * cache['hit_rate']:.0f}%)" if cache else "no compiles"


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="kbuild-bench-matrix-"))
    root = work / "swiglu"
    shutil.copytree(REPO / "examples" / "swiglu", root, ignore=shutil.ignore_patterns("build", "__pycache__"))
    all_three = " ".join(VARIANTS)  # globs OR: exactly these three

    singles = []
    for i, variant in enumerate(VARIANTS):
        seconds, report = kbuild_build(root, variant, work / f"single-{i}", work / f"ccache-single-{i}")
        assert report["counts"]["built"] == 1, statuses(report)
        singles.append(seconds)
        print(f"  alone, cold: {variant:36} {seconds:7.1f} s")
    shutil.rmtree(root / "build")
    together, report = kbuild_build(root, all_three, work / "cache", work / "ccache")
    assert report["counts"]["built"] == 3, statuses(report)
    again, again_report = kbuild_build(root, all_three, work / "cache", work / "ccache")
    shutil.rmtree(root / "build")
    kept, _ = kbuild_build(root, all_three, work / "cache", work / "ccache")
    shutil.rmtree(root / "build")
    warm, warm_report = kbuild_build(root, all_three, work / "cache-fresh", work / "ccache")

    total = sum(singles)
    print(f"sum of single-job times (cold):          {total:7.1f} s")
    print(f"the three in parallel (cold):             {together:7.1f} s   ratio {together / total:.2f} (target <= 0.65), "
          f"{report['concurrent']} at once")
    print(f"second run:                               {again:7.2f} s   ({statuses(again_report)}; target < 1 s)")
    print(f"rm -rf build, work trees kept:            {kept:7.1f} s   {together / kept:.1f}x faster than cold")
    print(f"rm -rf build, fresh work trees, warm ccache: {warm:7.1f} s   {together / warm:.1f}x faster than cold "
          f"(target >= 5x); {hit_rate(warm_report)}")
    print(f"cold run's cache: {hit_rate(report)}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
