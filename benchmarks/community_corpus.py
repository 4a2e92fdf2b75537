"""The "builds unchanged" check on real kernel repos: every kernel of a kernels-community
checkout, built by `kbuild build` for what this machine can build, then its own test suite
run by `kbuild test`, with one table row per kernel and the reason for every failure.

Scope per kernel (from `kbuild plan --json`, so the script and kbuild agree on what builds here):
- `[torch-noarch]` kernels: every noarch variant (torch-cpu, torch-cuda, torch-rocm, ...);
- `[torch]` kernels: their CPU variant, plus the CUDA variant for the kernels named by
  `--cuda` (default: the small CUDA repos relu, activation, rotary, tinygrad-rms, layer-norm);
- `--toolchains hidden` runs every kbuild with nvcc and hipcc taken off PATH (a machine without
  them); `--clean` removes each kernel's build/ first, so nothing is reused from an earlier run.

Get the corpus with the search tool's fetch of github:huggingface/kernels-community (a bare git
dir), then `mkdir KC && git -C REPO archive HEAD | tar -x -C KC`. Its code never enters this repo.

Usage: python benchmarks/community_corpus.py KC_DIR [--only relu,rmsnorm] [--cuda NAMES|none]
         [--toolchains present|hidden] [--clean] [--no-tests] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

SMALL_CUDA = ("relu", "activation", "rotary", "tinygrad-rms", "layer-norm")
TOOLCHAINS = ("nvcc", "hipcc")
BUILD_TIMEOUT = 3600
TEST_TIMEOUT = 1800


@dataclass
class Row:
    kernel: str
    kind: str = ""  # torch | noarch | (manifest error)
    backends: str = ""
    variants: list[str] = field(default_factory=list)  # the variants in scope
    built: int = 0
    build_seconds: float = 0.0
    build_failures: list[str] = field(default_factory=list)  # "variant: detail"
    check_skips: list[str] = field(default_factory=list)  # checks skipped with their reason
    tests: dict | None = None  # counts from `kbuild test --json`
    test_reason: str = ""  # why the tests did not run or did not pass
    test_failures: list[str] = field(default_factory=list)

    @property
    def builds(self) -> bool:
        return bool(self.variants) and self.built == len(self.variants)

    @property
    def tests_pass(self) -> bool:
        return bool(self.tests) and self.tests.get("ok", False) and self.tests.get("passed", 0) > 0


def kbuild_env(toolchains: str, scratch: Path) -> dict[str, str]:
    """The environment every kbuild call runs in. `hidden` replaces each PATH folder holding nvcc
    or hipcc by a shadow folder linking everything else in it: hipcc sits in /usr/bin beside g++,
    which the CPU kernels still need."""
    env = dict(os.environ)
    if toolchains == "hidden":
        env["PATH"] = os.pathsep.join(
            shadow_without_toolchains(Path(d), scratch / f"path{i}") for i, d in enumerate(env.get("PATH", "").split(os.pathsep))
        )
        for var in ("CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "HIP_PATH"):
            env.pop(var, None)
    return env


def shadow_without_toolchains(folder: Path, shadow: Path) -> str:
    """`folder` itself, or a shadow of it without the toolchain entries (hipcc, hipcc.pl, nvcc, ...)."""
    if not any((folder / tool).exists() for tool in TOOLCHAINS):
        return str(folder)
    shadow.mkdir(parents=True, exist_ok=True)
    for entry in folder.iterdir():
        if not entry.name.startswith(TOOLCHAINS):
            (shadow / entry.name).symlink_to(entry)
    return str(shadow)


def kbuild(args: list[str], env: dict[str, str], timeout: int) -> tuple[int, dict | None, str]:
    """(exit code, the --json document or None, stderr's last lines) of one kbuild call."""
    command = [sys.executable, "-m", "kernel_builder.cli", *args]
    # Its own process group, so that a timeout stops the compilers too: an orphaned ninja
    # would keep the kernel's work-tree lock and block the next run.
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return 124, None, f"timed out after {timeout} s"
    done = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    try:
        document = json.loads(done.stdout) if done.stdout.strip() else None
    except ValueError:
        document = None
    tail = " | ".join(line.strip() for line in done.stderr.strip().splitlines()[-3:])
    return done.returncode, document, tail


def in_scope(row: dict, kind: str, with_cuda: bool) -> bool:
    if not row["buildable"] or not row["variant"]:
        return False
    if kind == "noarch":
        return True
    return row["backend"] == "cpu" or (row["backend"] == "cuda" and with_cuda)


def manifest_facts(kernel_dir: Path) -> tuple[str, str]:
    """(kind, backends) read with kbuild's own parser; ('', error) when it refuses the file."""
    from kernel_builder.errors import KbuildError
    from kernel_builder.kernel.manifest import load_manifest

    try:
        manifest = load_manifest(kernel_dir)
    except KbuildError as e:
        return "", e.message
    return ("noarch" if manifest.noarch is not None else "torch"), ",".join(manifest.general.backends)


def wanted(kind: str, backends: str, with_cuda: bool) -> bool:
    names = backends.split(",")
    return kind == "noarch" or "cpu" in names or (with_cuda and "cuda" in names)


def run_kernel(kernel_dir: Path, with_cuda: bool, env: dict[str, str], tests: bool, clean: bool) -> Row | None:
    row = Row(kernel_dir.name)
    row.kind, row.backends = manifest_facts(kernel_dir)
    if not row.kind:
        row.kind, row.build_failures = "(manifest)", [row.backends]
        return row
    if not wanted(row.kind, row.backends, with_cuda):
        return None
    if clean:
        shutil.rmtree(kernel_dir / "build", ignore_errors=True)
    code, plan, tail = kbuild(["plan", str(kernel_dir), "--json"], env, 300)
    if plan is None:
        row.build_failures = [f"kbuild plan: {tail or f'exit {code}'}"]
        return row
    row.variants = [r["variant"] for r in plan if in_scope(r, row.kind, with_cuda)]
    unbuildable = [f"{r['variant'] or r['backend']}: {r['reason']}" for r in plan
                   if not r["buildable"] and (row.kind == "noarch" or r["backend"] == "cpu")]
    row.build_failures += [f"not buildable here: {u}" for u in unbuildable]
    if not row.variants:
        return row
    start = time.perf_counter()
    args = ["build", str(kernel_dir), "--json"] + [a for v in row.variants for a in ("--variant", v)]
    code, report, tail = kbuild(args, env, BUILD_TIMEOUT)
    row.build_seconds = time.perf_counter() - start
    if report is None:
        row.build_failures.append(f"kbuild build: {tail or f'exit {code}'}")
        return row
    for job in report["jobs"]:
        if job["status"] in ("built", "up-to-date"):
            row.built += 1
        elif job["status"] != "skipped":
            row.build_failures.append(f"{job['variant']}: {job['status']}: {job['detail']}")
        row.check_skips += [f"{job['variant']}: {c['check']} skipped: {c['detail']}"
                            for c in job.get("checks", ()) if c["status"] == "skipped"]
    if tests and row.built:
        run_tests(kernel_dir, row, env)
    return row


def run_tests(kernel_dir: Path, row: Row, env: dict[str, str]) -> None:
    if not (kernel_dir / "tests").is_dir():
        row.test_reason = "no tests/ folder"
        return
    code, result, tail = kbuild(["test", str(kernel_dir), "--json"], env, TEST_TIMEOUT)
    if result is None:
        row.test_reason = f"kbuild test: {tail or f'exit {code}'}"
        return
    row.tests = {**result.get("counts", {}), "ok": result.get("ok", False), "variant": result.get("variant")}
    failures = result.get("failures", ())
    # The kernel's own failures first; those of tests hard-coding a device this machine lacks after.
    kernel_failures = [f for f in failures if not f.get("needs_device")]
    row.test_failures = [f"{f['test']}: {f['message']}" for f in kernel_failures][:5]
    if len(kernel_failures) < len(failures):
        example = next(f for f in failures if f.get("needs_device"))
        row.test_failures.append(f"{len(failures) - len(kernel_failures)} failed on a device this machine lacks, "
                                 f"e.g. {example['test']}: {example['message'][:120]}")
    skipped = result.get("skipped", ())
    if not row.tests_pass:
        reasons = [f"{s['count']}x {s['reason']}" for s in skipped][:3]
        row.test_reason = "; ".join(reasons) or f"pytest exit {result.get('exit_code')}"


def print_table(rows: list[Row], toolchains: str) -> None:
    print(f"\n{'kernel':28} {'kind':7} {'built':>7} {'build s':>8}  {'tests (pass/fail/err/skip, device)':36} reason")
    for r in rows:
        t = r.tests
        # device: skipped or failed for want of a device this machine lacks.
        tests = (f"{t.get('passed', 0)}/{t.get('failed', 0)}/{t.get('errors', 0)}/{t.get('skipped', 0)}, "
                 f"{t.get('needs_device', 0) + t.get('failed_needs_device', 0)}") if t else "-"
        reasons = r.build_failures + r.test_failures + ([r.test_reason] if r.test_reason else [])
        print(f"{r.kernel:28} {r.kind:7} {f'{r.built}/{len(r.variants)}':>7} {r.build_seconds:8.1f}  {tests:36} "
              f"{' || '.join(reasons)[:400]}")
    built = [r for r in rows if r.builds]
    passing = [r for r in rows if r.tests_pass]
    print(f"\ntoolchains {toolchains}: {len(built)} of {len(rows)} kernels built every variant in scope; "
          f"{len(passing)} pass their own tests ({sum(bool(r.tests) for r in rows)} ran them)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kc_dir", type=Path, help="a kernels-community checkout (folders holding build.toml)")
    parser.add_argument("--only", default="", help="comma-separated kernel names (default: all)")
    parser.add_argument("--cuda", default=",".join(SMALL_CUDA), help="kernels whose CUDA variant is built too, or 'none'")
    parser.add_argument("--toolchains", choices=("present", "hidden"), default="present")
    parser.add_argument("--clean", action="store_true", help="remove each kernel's build/ first")
    parser.add_argument("--no-tests", action="store_true", help="build only")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args()

    only = {n for n in args.only.split(",") if n}
    cuda = set() if args.cuda == "none" else set(args.cuda.split(","))
    with tempfile.TemporaryDirectory(prefix="kbuild-corpus-") as scratch:
        return run_corpus(args, only, cuda, kbuild_env(args.toolchains, Path(scratch)))


def run_corpus(args: argparse.Namespace, only: set[str], cuda: set[str], env: dict[str, str]) -> int:
    kernels = sorted(p.parent for p in args.kc_dir.glob("*/build.toml") if not only or p.parent.name in only)
    if not kernels:
        print(f"no kernels (folders with build.toml) found in {args.kc_dir}", file=sys.stderr)
        return 2
    rows = []
    for kernel_dir in kernels:
        row = run_kernel(kernel_dir, kernel_dir.name in cuda, env, not args.no_tests, args.clean)
        if row is not None:
            rows.append(row)
            print(f"{row.kernel}: built {row.built}/{len(row.variants)} in {row.build_seconds:.0f} s; "
                  f"tests {row.tests or row.test_reason or '-'}", file=sys.stderr, flush=True)
    print_table(rows, args.toolchains)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
