"""The author's loop: what an edit, a commit and a build.toml flag change cost to rebuild,
side by side with a build of the same state that compiles everything (issue 29).

For each case, a copy of the example becomes a git repo of its own (committed), then:
  cold      the first build
  edit      one line appended to one unit's source (uncommitted: the id gains `_dirty`)
  commit    `git commit` of that edit, nothing else changed
  flags     a new define in one unit's build.toml flags
Each step is built incrementally (the kernel's own work tree) and, beside it, in a fresh
work tree (everything compiled), both with no compiler cache, so the figures are the
compiles themselves. Each row gives seconds and the sources Ninja compiled (the
`compiled` list of `kbuild build --json`).

Usage: python benchmarks/bench_edit_loop.py [CASE ...]
  cases: layer-norm-cpu (examples/layer-norm, this torch's CPU variant),
         swiglu-cu130 (examples/swiglu, torch214-cxx11-cu130-x86_64-linux; needs nvcc 13.0
         and creates its torch 2.14 build environment on first use: KBUILD_ENVS_DIR keeps it)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from kernel_builder.environments.store import envs_root  # noqa: E402

ENVS = envs_root()  # KBUILD_ENVS_DIR, else the user's kbuild cache


@dataclass(frozen=True)
class Case:
    example: str
    variant: str
    edited: str  # the source the edit step changes
    also_edited: str | None  # a second edit step (another backend's unit), or None
    flag_unit: str  # the [kernel.<name>] whose cxx-flags the flags step extends


def cpu_variant() -> str:
    import torch

    return "torch{}{}-cxx11-cpu-x86_64-linux".format(*torch.__version__.split(".")[:2])


CASES = {
    "layer-norm-cpu": lambda: Case("layer-norm", cpu_variant(), "layer_norm_cpu/layer_norm_cpu.cpp", None, "layer_norm_cpu"),
    "swiglu-cu130": lambda: Case(
        "swiglu", "torch214-cxx11-cu130-x86_64-linux", "swiglu_cuda/act_and_mul_kernel.cu", "swiglu_cpu/act_and_mul.cpp",
        "swiglu_cuda",
    ),
}


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                   env=dict(os.environ, GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="bench@localhost",
                            GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="bench@localhost"))


def build(root: Path, variant: str, cache: Path, out: Path) -> tuple[float, list[str]]:
    """One `kbuild build --json` without a compiler cache: (wall seconds, sources compiled)."""
    # Work trees of its own; build environments from the usual store, made once.
    env = dict(os.environ, KBUILD_CACHE_DIR=str(cache), KBUILD_ENVS_DIR=str(ENVS))
    command = [sys.executable, "-m", "kernel_builder.cli", "build", str(root), "--variant", variant,
               "--out", str(out), "--no-compiler-cache", "--json"]
    start = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"building {root.name} {variant} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    (job,) = json.loads(result.stdout)["jobs"]
    return seconds, job.get("compiled") or []


def add_flag(build_toml: Path, unit: str) -> None:
    """A define prepended to `[kernel.<unit>]`'s cxx-flags (the key added if missing)."""
    text = build_toml.read_text()
    start = text.index(f"[kernel.{unit}]\n")
    end = next((m.start() for m in re.finditer(r"^\[", text[start + 1:], re.M)), len(text) - start - 1) + start + 1
    section = text[start:end]
    if re.search(r"^cxx-flags = \[", section, re.M):
        section = re.sub(r"^cxx-flags = \[", 'cxx-flags = ["-DKBUILD_BENCH_FLAG=1", ', section, count=1, flags=re.M)
    else:
        head, _, rest = section.partition("\n")
        section = f'{head}\ncxx-flags = ["-DKBUILD_BENCH_FLAG=1"]\n{rest}'
    build_toml.write_text(text[:start] + section + text[end:])


def run_case(name: str, work: Path) -> list[tuple[str, float, list[str], float, list[str]]]:
    case = CASES[name]()
    root = work / name / case.example
    shutil.copytree(REPO / "examples" / case.example, root, ignore=shutil.ignore_patterns("build", "__pycache__"))
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "start")
    own_cache, out = work / name / "cache", work / name / "out"
    steps: list[tuple[str, callable]] = [("cold", lambda: None)]

    def edit(path: str, n: int):
        def apply() -> None:
            with open(root / path, "a") as f:
                f.write(f"// bench edit {n}\n")
        return apply

    steps.append((f"edit {case.edited}", edit(case.edited, 1)))
    steps.append(("commit", lambda: (git(root, "add", "-A"), git(root, "commit", "-q", "-m", "edit"))))
    if case.also_edited:
        steps.append((f"edit {case.also_edited}", edit(case.also_edited, 2)))
    steps.append((f"flag in [kernel.{case.flag_unit}]", lambda: add_flag(root / "build.toml", case.flag_unit)))
    rows = []
    for n, (label, change) in enumerate(steps):
        change()
        seconds, compiled = build(root, case.variant, own_cache, out)
        # The same state in a fresh work tree and output: everything compiled.
        full_seconds, full_compiled = build(root, case.variant, work / name / f"full-{n}", work / name / f"full-out-{n}")
        rows.append((label, seconds, compiled, full_seconds, full_compiled))
        print(f"  {name}: {label}: {seconds:.1f} s, {len(compiled)} compiled", file=sys.stderr, flush=True)
    return rows


def main() -> None:
    names = sys.argv[1:] or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        sys.exit(f"unknown case {unknown[0]!r}; cases: {', '.join(CASES)}")
    work = Path(tempfile.mkdtemp(prefix="kbuild-bench-edit-"))
    try:
        for name in names:
            rows = run_case(name, work)
            print(f"\n{name} ({CASES[name]().variant}), no compiler cache:")
            print(f"  {'step':<44} {'incremental':>12} {'compiled':>9}   {'everything':>11} {'compiled':>9}   speed-up")
            for label, seconds, compiled, full_seconds, full_compiled in rows:
                print(f"  {label:<44} {seconds:>10.1f} s {len(compiled):>9}   {full_seconds:>9.1f} s {len(full_compiled):>9}"
                      f"   {full_seconds / seconds:>6.1f}x")
                if 0 < len(compiled) < len(full_compiled):
                    print(f"  {'':<44} recompiled: {', '.join(Path(c).name for c in compiled)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
