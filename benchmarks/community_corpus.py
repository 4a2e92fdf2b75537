"""The "builds unchanged" check on real kernel repos: every kernel of a kernels-community
checkout, built by `kbuild build` for what this machine can build, then its own test suite
run by `kbuild test`, with one table row per kernel and the reason for every failure.

Scope per kernel (from `kbuild plan --json`, so the script and kbuild agree on what builds here):
- `[torch-noarch]` kernels: every noarch variant (torch-cpu, torch-cuda, torch-rocm, ...);
- `[torch]` kernels: their CPU variant, plus the CUDA variant for the kernels named by
  `--with-cuda` (default: the small CUDA repos relu, activation, rotary, tinygrad-rms, layer-norm);
- `--toolchains hidden` runs every kbuild on a machine without GPU toolkits: nvcc, hipcc and
  icpx taken off PATH and, in a private mount namespace (bubblewrap), the standard folders
  kbuild searches (/usr/local/cuda, /opt/rocm, ...) masked by empty ones; the script checks
  that kbuild finds no toolkit there before it starts. `--clean` removes each kernel's build/
  first, so nothing is reused from an earlier run.

`--cuda` is the CUDA sweep instead: every CUDA-only `[torch]` kernel (backends = ["cuda"]; with
`--only`, the named kernels that have a CUDA backend) compiled unchanged for one CUDA release
(`--cuda-compute`, default cu130: the newest torch of that release kbuild can build here, or the
one `--cuda-torch 2.13` names, as kernel-builder's lock may build only older torch), for one
capability (`--cuda-capabilities`, default 9.0; `kernel` for each kernel's own list), into a
scratch output folder; no tests (they need a GPU). One row per kernel: built, failed with the
first compiler error, or timed out (`--build-timeout`, default 3600 s: the flash-attn3 repos have
400 CUDA units each, hours on 2 cores even at one capability), and the time. `--dry-run` prints
the plan (variant, environment) and compiles nothing.

Get the corpus with the search tool's fetch of github:huggingface/kernels-community (a bare git
dir), then `mkdir KC && git -C REPO archive HEAD | tar -x -C KC`. Its code never enters this repo.

Usage: python benchmarks/community_corpus.py KC_DIR [--only relu,rmsnorm] [--with-cuda NAMES|none]
         [--toolchains present|hidden] [--clean] [--no-tests] [--json FILE]
       python benchmarks/community_corpus.py KC_DIR --cuda [--cuda-capabilities 9.0|kernel]
         [--cuda-compute cu130] [--cuda-torch 2.13] [--build-timeout S] [--only NAMES] [--dry-run]
         [--json FILE]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

SMALL_CUDA = ("relu", "activation", "rotary", "tinygrad-rms", "layer-norm")
TOOLCHAINS = ("nvcc", "hipcc", "icpx")
# Besides PATH, the folders kbuild looks in for a toolkit (compile/backends/cuda.py's
# STANDARD_CUDA_HOME, ROCm's and oneAPI's usual homes), masked under --toolchains hidden.
STANDARD_TOOLKITS = ("/usr/local/cuda", "/usr/local/cuda-*", "/opt/cuda", "/opt/rocm", "/opt/rocm-*", "/opt/intel/oneapi")
BUILD_TIMEOUT = 3600
TIMED_OUT = 124
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
        for var in ("CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "HIP_PATH", "ONEAPI_ROOT"):
            env.pop(var, None)
        folders = toolkit_folders()
        if folders:
            bwrap = shutil.which("bwrap")
            if bwrap is None:
                raise SystemExit(f"--toolchains hidden masks {', '.join(folders)} with bubblewrap: install it (apt-get install bubblewrap)")
            env[MASK_TOOLKITS], env[BWRAP] = os.pathsep.join(folders), bwrap
    return env


FOUND_TOOLKITS = (
    "from kernel_builder.compile.backends.cuda import nvcc_path; "
    "from kernel_builder.compile.backends.rocm_toolchain import hipcc_path; import shutil; "
    "print(*[f'{name} at {path}' for name, path in (('nvcc', nvcc_path()), ('hipcc', hipcc_path()), "
    "('icpx', shutil.which('icpx'))) if path], sep='; ')"
)


def toolkits_kbuild_finds(env: dict[str, str]) -> str:
    """What kbuild's own toolkit search finds in `env` (and its mask), '' for nothing."""
    done = subprocess.run(masked([sys.executable, "-c", FOUND_TOOLKITS], env), env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return f"(the check failed: {done.stderr.strip().splitlines()[-1:] or done.returncode})"
    return done.stdout.strip()


def shadow_without_toolchains(folder: Path, shadow: Path) -> str:
    """`folder` itself, or a shadow of it without the toolchain entries (hipcc, hipcc.pl, nvcc, ...)."""
    if not any((folder / tool).exists() for tool in TOOLCHAINS):
        return str(folder)
    shadow.mkdir(parents=True, exist_ok=True)
    for entry in folder.iterdir():
        if not entry.name.startswith(TOOLCHAINS):
            (shadow / entry.name).symlink_to(entry)
    return str(shadow)


def toolkit_folders() -> list[str]:
    """The standard toolkit folders that exist here, links resolved (a tmpfs goes on the folder)."""
    found = {os.path.realpath(p) for pattern in STANDARD_TOOLKITS for p in glob.glob(pattern) if os.path.isdir(p)}
    return sorted(found)


def masked(command: list[str], env: dict[str, str]) -> list[str]:
    """`command`, run with the standard toolkit folders hidden when `env` hides the toolchains
    (MASK_TOOLKITS): in a bubblewrap namespace that sees the whole machine but an empty tmpfs
    over each of them. Needs bwrap and the right to make a mount namespace (root, or user namespaces)."""
    if not env.get(MASK_TOOLKITS):
        return command
    mounts = [a for folder in env[MASK_TOOLKITS].split(os.pathsep) for a in ("--tmpfs", folder)]
    return [env[BWRAP], "--dev-bind", "/", "/", *mounts, "--", *command]


MASK_TOOLKITS, BWRAP = "KBUILD_CORPUS_MASK", "KBUILD_CORPUS_BWRAP"  # the script's own, never kbuild's


def kbuild(args: list[str], env: dict[str, str], timeout: int) -> tuple[int, dict | None, str]:
    """(exit code, the --json document or None, stderr's last lines) of one kbuild call."""
    command = masked([sys.executable, "-m", "kernel_builder.cli", *args], env)
    # Its own process group, so that a timeout stops the compilers too: an orphaned ninja
    # would keep the kernel's work-tree lock and block the next run.
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(process)
        return TIMED_OUT, None, f"timed out after {timeout} s"
    except BaseException:  # Ctrl-C, or SIGTERM of this script (main): its build stops too
        stop(process)
        raise
    done = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    try:
        document = json.loads(done.stdout) if done.stdout.strip() else None
    except ValueError:
        document = None
    tail = " | ".join(line.strip() for line in done.stderr.strip().splitlines()[-3:])
    return done.returncode, document, tail


def stop(process: subprocess.Popen, grace: float = 60) -> None:
    """SIGTERM first: kbuild then stops its build tools, which run in sessions of their own
    (kernel_builder.compile.tool_processes), so a SIGKILL of its group alone would leave Ninja
    compiling on; SIGKILL only if it has not ended within `grace` seconds."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.communicate(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()


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


# -- the CUDA sweep (--cuda) -----------------------------------------------------------------
@dataclass
class CudaRow:
    kernel: str
    variant: str = ""
    status: str = ""  # built | failed | timed out | stopped | not buildable | refused | planned
    seconds: float = 0.0
    reason: str = ""  # the first compiler error, kbuild's one line, or (planned) the environment


class SweepStopped(Exception):
    """Ctrl-C or SIGTERM during a kernel's build: its row says how far the build got."""

    def __init__(self, row: CudaRow):
        super().__init__(row.kernel)
        self.row = row


def cuda_sweep_wanted(kind: str, backends: str, named: bool) -> bool:
    """A CUDA-only `[torch]` kernel; a kernel named by --only needs only a CUDA backend."""
    names = backends.split(",")
    return kind == "torch" and "cuda" in names and (named or names == ["cuda"])


def cuda_variant(plan: list[dict], compute: str, torch: tuple[int, int] | None = None) -> tuple[str, str]:
    """(variant, environment) of the newest torch (or of `torch`) kbuild builds here for
    `compute` (x86_64), or ('', the reason none is buildable)."""
    rows = [r for r in plan if r["backend"] == "cuda" and f"-{compute}-" in (r["variant"] or "")
            and "x86_64" in r["variant"] and torch in (None, torch_of(r["variant"]))]
    buildable = [r for r in rows if r["buildable"]]
    if buildable:
        newest = max(buildable, key=lambda r: torch_of(r["variant"]))
        return newest["variant"], newest["environment"] or ""
    if rows:
        return "", f"{rows[0]['variant']}: {rows[0]['reason']}"
    # A kernel whose [general.cuda] minver/maxver exclude the release has none of its variants.
    computes = sorted({m.group(1) for r in plan if r["backend"] == "cuda" for m in [re.search(r"-(cu\d+)-", r["variant"] or "")] if m})
    return "", f"no {compute} variant: the kernel's build.toml bounds its CUDA to {', '.join(computes) or 'nothing'}"


def torch_of(variant: str) -> tuple[int, int]:
    """(2, 14) of torch214-cxx11-cu130-x86_64-linux or torch-2.14-cxx11-cu130-... (either name style)."""
    m = re.match(r"torch-?(\d)\.?(\d+)", variant)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def first_error(job: dict) -> str:
    """The first compiler error of a failed job's log (file:line: message), else the first line
    of the log that says error, else kbuild's own detail."""
    from kernel_builder.compile.diagnostics import compiler_errors

    log = Path(job["log"]) if job.get("log") else None
    text = log.read_text(errors="replace") if log is not None and log.is_file() else ""
    errors = compiler_errors(text)
    if errors:
        e = errors[0]
        return f"{e.file}:{e.line}: error: {e.message}"
    line = next((l.strip() for l in text.splitlines() if re.search(r"\berror\b|fatal", l, re.I)), "")
    detail = (job.get("detail") or "").strip()
    return line or (detail.splitlines()[0] if detail else f"status {job['status']}")


def run_cuda_kernel(kernel_dir: Path, args: argparse.Namespace, env: dict[str, str], out_root: Path) -> CudaRow | None:
    row = CudaRow(kernel_dir.name)
    kind, backends = manifest_facts(kernel_dir)
    if not kind:
        row.status, row.reason = "refused", backends
        return row
    if not cuda_sweep_wanted(kind, backends, bool(args.only)):
        return None
    code, plan, tail = kbuild(["plan", str(kernel_dir), "--matrix", "backend=cuda", "--json"], env, 300)
    if plan is None:
        row.status, row.reason = "refused", f"kbuild plan: {tail or f'exit {code}'}"
        return row
    row.variant, why = cuda_variant(plan, args.cuda_compute, args.cuda_torch)
    if not row.variant:
        row.status, row.reason = "not buildable", why
        return row
    if args.dry_run:
        row.status, row.reason = "planned", why
        return row
    command = ["build", str(kernel_dir), "--variant", row.variant, "--out", str(out_root / kernel_dir.name), "--json"]
    if args.cuda_capabilities != "kernel":
        command += ["--cuda-arch", args.cuda_capabilities]
    start = time.perf_counter()
    try:
        code, report, tail = kbuild(command, env, args.build_timeout)
    except KeyboardInterrupt:
        row.seconds = time.perf_counter() - start
        row.status, row.reason = "stopped", compile_progress(env, row.variant, start) or "stopped before any object compiled"
        raise SweepStopped(row) from None
    row.seconds = time.perf_counter() - start
    job = next((j for j in (report or {}).get("jobs", ()) if j["variant"] == row.variant), None)
    if code == TIMED_OUT:
        row.status, row.reason = "timed out", f"still compiling after {args.build_timeout} s (--build-timeout)"
        progress = compile_progress(env, row.variant, start)
        if progress:
            row.reason += f"; {progress}"
    elif job is None:
        row.status, row.reason = "failed", f"kbuild build: {tail or f'exit {code}'}"
    elif job["status"] in ("built", "up-to-date"):
        row.status = "built"
    else:
        row.status, row.reason = job["status"], first_error(job)
    return row


def compile_progress(env: dict[str, str], variant: str, since: float) -> str:
    """"N of M objects compiled" of the variant's Ninja tree that this build wrote to (kbuild's
    cache work/<key>/<variant>[-suffix]/build), or '' when none is found: how far a stopped build got."""
    cache = Path(env.get("KBUILD_CACHE_DIR") or Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kbuild")
    logs = [p for p in cache.glob(f"work/*/{variant}*/build/.ninja_log") if p.stat().st_mtime >= since - 1]
    if not logs:
        return ""
    log = max(logs, key=lambda p: p.stat().st_mtime)
    done = {line.split("\t")[3] for line in log.read_text(errors="replace").splitlines()[1:] if line.count("\t") >= 4}
    planned = re.findall(r"^build ([^:]+\.o):", (log.parent / "build.ninja").read_text(errors="replace"), re.M)
    compiled = sum(target in done for target in planned)
    return f"{compiled} of {len(planned)} objects compiled, no error"


def print_cuda_table(rows: list[CudaRow], args: argparse.Namespace) -> None:
    print(f"\n{'kernel':24} {'variant':40} {'status':14} {'seconds':>8}  reason")
    for r in rows:
        print(f"{r.kernel:24} {r.variant:40} {r.status:14} {r.seconds:8.1f}  {r.reason[:300]}")
    built = sum(r.status == "built" for r in rows)
    caps = "each kernel's own capabilities" if args.cuda_capabilities == "kernel" else f"capability {args.cuda_capabilities}"
    verb = "planned" if args.dry_run else "compile unchanged"
    count = sum(r.status == "planned" for r in rows) if args.dry_run else built
    print(f"\n{count} of {len(rows)} CUDA kernels {verb} for {args.cuda_compute} ({caps}); "
          f"{sum(r.seconds for r in rows) / 60:.1f} min of builds")


def run_cuda_sweep(args: argparse.Namespace, only: set[str], env: dict[str, str], scratch: Path) -> int:
    kernels = sorted(p.parent for p in args.kc_dir.glob("*/build.toml") if not only or p.parent.name in only)
    rows, stopped = [], ""
    # A stopped sweep of hours still prints (and writes) the rows it has: they are the result.
    try:
        for kernel_dir in kernels:
            row = run_cuda_kernel(kernel_dir, args, env, scratch / "out")
            if row is None:
                continue
            rows.append(row)
            print(f"{row.kernel}: {row.status} in {row.seconds:.0f} s {row.reason[:200]}", file=sys.stderr, flush=True)
            shutil.rmtree(scratch / "out" / kernel_dir.name, ignore_errors=True)  # the variants are not kept: GBs
    except SweepStopped as interrupted:
        rows.append(interrupted.row)
        stopped = interrupted.row.kernel
    except KeyboardInterrupt:
        stopped = "a plan"
    if not rows and not stopped:
        print(f"no CUDA kernels (folders with build.toml) found in {args.kc_dir}", file=sys.stderr)
        return 2
    print_cuda_table(rows, args)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    if stopped:
        print(f"sweep stopped (Ctrl-C or SIGTERM) during {stopped}; the table holds the kernels before it", file=sys.stderr)
        return 130
    return 0


def _interrupted(signum, frame) -> None:
    raise KeyboardInterrupt  # a SIGTERM stops the running kbuild as Ctrl-C does (kbuild())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kc_dir", type=Path, help="a kernels-community checkout (folders holding build.toml)")
    parser.add_argument("--only", default="", help="comma-separated kernel names (default: all)")
    parser.add_argument("--with-cuda", default=",".join(SMALL_CUDA), help="kernels whose CUDA variant is built too, or 'none'")
    parser.add_argument("--toolchains", choices=("present", "hidden"), default="present")
    parser.add_argument("--clean", action="store_true", help="remove each kernel's build/ first")
    parser.add_argument("--no-tests", action="store_true", help="build only")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    parser.add_argument("--cuda", action="store_true", help="the CUDA sweep: compile every CUDA-only kernel instead")
    parser.add_argument("--cuda-capabilities", default="9.0",
                        help="with --cuda: kbuild build's --cuda-arch (one or a few, e.g. 9.0 or 8.0,9.0), or 'kernel' "
                             "for each kernel's own list")
    parser.add_argument("--cuda-compute", default="cu130", help="with --cuda: the CUDA release to build for")
    parser.add_argument("--cuda-torch", type=lambda text: tuple(int(n) for n in text.split(".")[:2]), default=None,
                        help="with --cuda: the torch release (e.g. 2.13) instead of the newest kbuild builds here")
    parser.add_argument("--dry-run", action="store_true", help="with --cuda: print the plan, compile nothing")
    parser.add_argument("--build-timeout", type=int, default=BUILD_TIMEOUT,
                        help="with --cuda: seconds one kernel may compile before its row says timed out (default 3600)")
    args = parser.parse_args()

    only = {n for n in args.only.split(",") if n}
    with tempfile.TemporaryDirectory(prefix="kbuild-corpus-") as scratch:
        env = kbuild_env(args.toolchains, Path(scratch))
        if args.toolchains == "hidden":
            found = toolkits_kbuild_finds(env)
            if found:
                print(f"--toolchains hidden, but kbuild still finds {found}", file=sys.stderr)
                return 2
        if args.cuda:
            return run_cuda_sweep(args, only, env, Path(scratch))
        cuda = set() if args.with_cuda == "none" else set(args.with_cuda.split(","))
        return run_corpus(args, only, cuda, env)


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
    # In the script's own process only: tests call main() inside pytest's.
    signal.signal(signal.SIGTERM, _interrupted)
    sys.exit(main())
