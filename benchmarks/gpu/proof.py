"""The GPU proof: build every example's CUDA variant with this machine's own torch, run
each example's own tests on the GPU, and time the kernels against PyTorch.

Run it through run.sh (which puts kbuild from this working tree on the path):

    benchmarks/gpu/run.sh                    # on a machine with an NVIDIA GPU
    benchmarks/gpu/run.sh --dry-run          # anywhere: the CPU variants, tiny shapes

It prints one table and writes proof.json to --out (default: $OUT, else ./gpu-proof).
Every step's failure is recorded and the run goes on: the table says what failed, and
the exit status is non-zero when anything did.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

import torch

import cases
from timing import copy_bandwidth

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = ("relu", "swiglu", "layer-norm", "flash-attn")


@dataclass(frozen=True)
class Profile:
    """Sizes of one run: the real one on a GPU, or the dry run's tiny CPU one."""

    device: str
    dtypes: tuple[str, ...]
    shapes: tuple[tuple[int, int], ...]  # (tokens, hidden) of the memory-bound ops
    attention_dtypes: tuple[str, ...]  # SDPA's flash backend takes no fp32 on a GPU
    seqlens: tuple[int, ...]
    head_dims: tuple[int, ...]
    attention_tokens: int  # batch * seqlen
    heads: int
    reps: int


# One memory-bound shape, 16384 x 8192 (256 MiB in bf16, far past an H200's 60 MB L2): each
# row compiles its torch.compile baseline (seconds each), and the run must stay within 8 min.
GPU = Profile("cuda", ("bf16", "fp32"), ((16384, 8192),), ("bf16", "fp16"), (1024, 2048, 4096, 8192, 16384),
              (64, 128), 16384, 16, 20)
DRY_RUN = Profile("cpu", ("bf16", "fp32"), ((64, 256),), ("bf16", "fp32"), (128, 256), (64, 128), 256, 2, 3)


@dataclass
class Step:
    example: str
    ok: bool
    seconds: float
    detail: str = ""
    counts: dict = field(default_factory=dict)


def variant_name() -> str:
    """This machine's variant for its own torch: legacy name, as kbuild builds by default."""
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    compute = f"cu{torch.version.cuda.replace('.', '')}" if torch.version.cuda and torch.cuda.is_available() else "cpu"
    return f"torch{major}{minor}-cxx11-{compute}-{platform.machine()}-linux"


def kbuild(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernel_builder.cli", *args], capture_output=True, text=True, check=False)


def build(example: Path, variant: str, max_jobs: int) -> Step:
    """`kbuild build` of one variant with this interpreter's torch (`--env`)."""
    start = time.monotonic()
    result = kbuild("build", str(example), "--variant", variant, "--env", sys.executable, "--no-create-env",
                    "--max-jobs", str(max_jobs), "--json")
    seconds = time.monotonic() - start
    try:
        (job,) = json.loads(result.stdout)["jobs"]
    except (ValueError, KeyError):
        tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return Step(example.name, False, seconds, f"kbuild exited {result.returncode}: {tail}")
    ok = job["status"] in ("built", "up-to-date")
    detail = job.get("detail") or job["status"]
    sass = sass_architectures(example / "build" / variant)
    return Step(example.name, ok, seconds, f"{detail}; SASS {', '.join(sass)}" if sass else detail)


def sass_architectures(variant_dir: Path) -> list[str]:
    """The sm_XX machine code in the variant's libraries (cuobjdump), if any."""
    cuobjdump = shutil.which("cuobjdump")
    found: set[str] = set()
    for library in variant_dir.rglob("*.so") if cuobjdump else ():
        listing = subprocess.run([cuobjdump, "--list-elf", str(library)], capture_output=True, text=True, check=False)
        found.update(re.findall(r"\.(sm_\d+a?)\.", listing.stdout))
    return sorted(found)


def run_tests(example: Path, device: str, results: Path) -> Step:
    """The example's own test suite, with its tensors on `device` (the examples' conftest
    reads KERNEL_TEST_DEVICE), against the variant just built."""
    report = results / f"tests-{example.name}.xml"
    env = dict(os.environ, KERNEL_TEST_DEVICE=device, PYTHONDONTWRITEBYTECODE="1")
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", str(example / "tests")],
        cwd=example, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    try:
        suite = ElementTree.parse(report).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    except (OSError, ElementTree.ParseError):
        tail = (result.stdout.strip().splitlines() or ["no output"])[-1]
        return Step(example.name, False, seconds, f"pytest exited {result.returncode}: {tail}")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    failed = [f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
              for case in suite.iter("testcase") if case.find("failure") is not None or case.find("error") is not None]
    detail = "; ".join(failed[:5]) + (f" (+{len(failed) - 5} more)" if len(failed) > 5 else "")
    return Step(example.name, result.returncode == 0, seconds, detail, counts)


def load(example: Path):
    from kernel_builder.runtime import load_local

    return load_local(example)


def print_table(title: str, rows: list[cases.Row], baselines: tuple[str, ...]) -> None:
    print(f"\n{title}")
    head = f"{'example':<11}{'op':<13}{'dir':<4}{'dtype':<6}{'shape':<22}{'ms':>9}{'rate':>9}"
    head += "".join(f"{b + ' ms':>12}{'x':>8}" for b in baselines) + f"{'% copy':>8}{'err':>9}  ok"
    print(head)
    print("-" * len(head))
    for r in rows:
        line = f"{r.example:<11}{r.op:<13}{r.direction:<4}{r.dtype:<6}{r.shape:<22}"
        if r.kernel_ms is None:
            print(line + f"  {r.note}")
            continue
        line += f"{r.kernel_ms:>9.3f}{r.kernel_rate:>9.1f}"
        for b in baselines:
            line += f"{r.baselines_ms[b]:>12.3f}{r.speedup(b):>7.2f}x"
        line += f"{r.copy_share * 100:>7.0f}%" if r.copy_share is not None else f"{'':>8}"
        print(line + f"{r.error:>9.1e}  {'yes' if r.ok else 'NO'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="CPU variants and tiny shapes: checks the script itself")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-proof"))
    parser.add_argument("--work", type=Path, default=None, help="where the examples are copied and built")
    parser.add_argument("--examples", nargs="+", default=list(EXAMPLES), choices=EXAMPLES)
    parser.add_argument("--skip-tests", action="store_true", help="build and time only")
    args = parser.parse_args()

    if not args.dry_run and not torch.cuda.is_available():
        print("gpu-proof: torch sees no CUDA device; run with --dry-run for the CPU check of this script", file=sys.stderr)
        return 2
    profile = DRY_RUN if args.dry_run else GPU
    # Absolute from here on: each example's tests run with its own folder as the working
    # directory, where a relative --out or --work would name nothing.
    args.out = args.out.absolute()
    args.out.mkdir(parents=True, exist_ok=True)
    work = (args.work or args.out / "work").absolute()
    variant = variant_name()
    gpu = torch.cuda.get_device_name() if profile.device == "cuda" else None
    capability = ".".join(map(str, torch.cuda.get_device_capability())) if gpu else None
    cores = os.cpu_count() or 1
    print(f"gpu-proof: torch {torch.__version__}, variant {variant}, device {gpu or 'cpu'}"
          f"{f' (sm {capability})' if capability else ''}, {cores} cores, python {platform.python_version()}")

    # 1. Build: all examples at once, the cores shared between them.
    roots = []
    for name in args.examples:
        root = work / name
        if not root.exists():
            shutil.copytree(REPO / "examples" / name, root, ignore=shutil.ignore_patterns("build", "__pycache__"))
        roots.append(root)
    per_build = max(1, cores // len(roots))
    with concurrent.futures.ThreadPoolExecutor(len(roots)) as pool:
        builds = list(pool.map(lambda r: build(r, variant, per_build), roots))
    for b in builds:
        print(f"build  {b.example:<11} {'ok' if b.ok else 'FAILED':<7} {b.seconds:6.1f} s  {b.detail}")

    # 2. Each example's own tests on the device.
    tests = []
    for root, b in zip(roots, builds):
        if args.skip_tests or not b.ok:
            continue
        step = run_tests(root, profile.device, args.out)
        tests.append(step)
        c = step.counts
        print(f"tests  {step.example:<11} {'ok' if step.ok else 'FAILED':<7} {step.seconds:6.1f} s  "
              f"{c.get('passed', 0)} passed, {c.get('failures', 0) + c.get('errors', 0)} failed, "
              f"{c.get('skipped', 0)} skipped  {step.detail}")

    # 3. Timings against PyTorch.
    modules = {}
    for root, b in zip(roots, builds):
        if b.ok:
            try:
                modules[root.name] = load(root)
            except Exception as error:
                print(f"load   {root.name:<11} FAILED  {type(error).__name__}: {error}")
    copy_rates: dict[int, float] = {}

    def copy_rate(nbytes: int) -> float:
        if nbytes not in copy_rates:
            copy_rates[nbytes] = copy_bandwidth(nbytes, profile.device, profile.reps)
        return copy_rates[nbytes]

    memory = list(cases.memory_bound_rows(args.examples, modules, profile.dtypes, profile.shapes, profile.device, profile.reps,
                                          copy_rate))
    attention = []
    if "flash-attn" in args.examples:
        attention = list(cases.attention_rows(modules.get("flash-attn"), profile.attention_dtypes, profile.seqlens,
                                              profile.head_dims, profile.device, profile.reps,
                                              profile.attention_tokens, profile.heads))
    print_table("memory-bound ops (GB/s; x = speedup over the baseline; % copy = share of a plain copy's GB/s)",
                memory, ("eager", "compile"))
    print_table("flash-attn against SDPA's flash backend (TFLOP/s)", attention, ("sdpa",))

    failed = [s for s in builds + tests if not s.ok] + [r for r in memory + attention if not r.ok]
    report = {
        "torch": torch.__version__, "variant": variant, "device": gpu or "cpu", "capability": capability,
        "dry_run": args.dry_run, "cores": cores,
        "copy_bandwidth_gbps": {str(k): v / 1e9 for k, v in copy_rates.items()},
        "builds": [vars(b) for b in builds], "tests": [vars(t) for t in tests],
        "memory_bound": [r.to_json() for r in memory], "attention": [r.to_json() for r in attention],
        "failed": len(failed),
    }
    (args.out / "proof.json").write_text(json.dumps(report, indent=1))
    print(f"\ngpu-proof: {len(failed)} failed step(s) or row(s); report {args.out / 'proof.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
