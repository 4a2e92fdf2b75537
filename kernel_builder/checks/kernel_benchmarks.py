"""`kbuild bench`: run a kernel's own benchmarks (KERNEL_DIR/benchmarks/benchmark*.py, classes
of `kernels.benchmark.Benchmark`, the format kernel-builder's `init` writes) against its built
variant, with `kernels benchmark` itself, so a script that runs here runs the same on the Hub.

`kernels benchmark PATH` loads the kernel from PATH/build/ with `get_local_kernel` and execs the
scripts from PATH/benchmarks/. kbuild points it at a temporary folder laid out as the kernel repo
(every top-level entry of KERNEL_DIR linked in, so a script's relative paths resolve) whose
build/ holds exactly the chosen variant: the benchmarks time that build, not whichever variant
of build/ `kernels` would pick. They run in the interpreter `kbuild test` runs tests in (the
variant's build environment, plus the kernel's runtime needs, `kernels` and `tabulate`, which
`kernels benchmark` prints its table with), made once and cached."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kernel_builder.checks.kernel_tests import KERNELS_PIN, packages_tests_import, planned_installs, test_environment
from kernel_builder.environments.runtime_overlay import kernel_runtime_needs
from kernel_builder.errors import UsageError
from kernel_builder.kernel.manifest import Manifest
from kernel_builder.runtime.loader import read_metadata

# What `kernels benchmark` runs (kernels 0.19.1, cli/benchmark.py: discover_benchmark_scripts).
SCRIPTS = "benchmark*.py"
# `kernels benchmark` refuses to start without it (the `benchmark` extra; matplotlib and numpy
# there are for --visual only).
TABULATE = "tabulate>=0.9"
# The `kernels` console script of the environment, whatever module it lives in.
KERNELS_CLI = (
    "import sys; from importlib.metadata import entry_points; sys.argv[0] = 'kernels'; "
    "sys.exit(entry_points(group='console_scripts')['kernels'].load()())"
)


@dataclass
class BenchRun:
    kernel: str
    variant: str
    python: str
    exit_code: int
    results: list = field(default_factory=list)  # kernels' payload: [{workload, timingResults, verified}]
    machine: dict = field(default_factory=dict)  # kernels' machineInfo
    error: str = ""  # the last line `kernels benchmark` wrote when it failed

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "variant": self.variant, "python": self.python, "ok": self.ok,
                "exit_code": self.exit_code, "results": self.results, "machine": self.machine, "error": self.error}

    def lines(self) -> list[str]:
        """What `kbuild bench` prints after kernels' own table: one line per workload."""
        if not self.ok:
            return [f"{self.kernel} ({self.variant}): kernels benchmark failed (exit {self.exit_code}): {self.error}"]
        lines = [f"{self.kernel} ({self.variant}): {len(self.results)} workloads"]
        for result in self.results:
            timing = result["timingResults"]
            verified = {True: "verified", False: "MISMATCH"}.get(result.get("verified"), "not verified")
            lines.append(f"  {result['workload']}: mean {timing['mean_ms']:.4f} ms, min {timing['min_ms']:.4f} ms "
                         f"over {timing['iterations']} iterations, {verified}")
        return lines


def benchmark_scripts(kernel_dir: Path) -> list[Path]:
    """KERNEL_DIR/benchmarks/benchmark*.py, each defining a Benchmark subclass, or a one-line
    error before anything is built (`kernels benchmark` would fail on either)."""
    scripts = sorted((kernel_dir / "benchmarks").glob(SCRIPTS))
    if not scripts:
        raise UsageError(
            f"no benchmarks/{SCRIPTS} in {kernel_dir}: `kbuild bench` and `kernels benchmark` run those scripts, "
            "classes of kernels.benchmark.Benchmark (`kbuild init` writes one)"
        )
    for script in scripts:
        if not defines_benchmark(script):
            raise UsageError(
                f"{script.relative_to(kernel_dir)} defines no kernels.benchmark.Benchmark subclass, and `kernels benchmark` "
                f"runs every benchmarks/{SCRIPTS}: add one, or rename a standalone script so it does not match"
            )
    return scripts


def defines_benchmark(script: Path) -> bool:
    """Whether `script` defines a class deriving from Benchmark: directly, through a class of the
    same file, or from a base imported from elsewhere (which may be one; `kernels` decides)."""
    try:
        tree = ast.parse(script.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, OSError):
        return True  # `kernels benchmark` reports the broken script itself
    local = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}

    def derives(node: ast.ClassDef, seen: frozenset[str] = frozenset()) -> bool:
        for base in node.bases:
            name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
            if name == "Benchmark":
                return True
            if name in local and name not in seen and derives(local[name], seen | {node.name}):
                return True
            if name and name not in local and name != "object":
                return True  # imported: perhaps a Benchmark subclass
        return False

    return any(derives(node) for node in local.values())


def repo_view(kernel_dir: Path, variant_dir: Path, into: Path) -> Path:
    """`into`/<kernel folder name>: KERNEL_DIR's top-level entries linked in, and a build/ holding
    only `variant_dir`, for `kernels benchmark` to load that variant and run the scripts."""
    repo = into / kernel_dir.name
    repo.mkdir()
    for entry in kernel_dir.iterdir():
        if entry.name != "build":
            (repo / entry.name).symlink_to(entry.resolve())
    (repo / "build").mkdir()
    (repo / "build" / variant_dir.name).symlink_to(variant_dir.resolve(), target_is_directory=True)
    return repo


def run_kernel_benchmarks(
    kernel_dir: Path,
    manifest: Manifest,
    variant_dir: Path,
    *,
    base_python: str,
    iterations: int = 100,
    warmup: int = 10,
    capture: bool = False,
    announce: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> BenchRun:
    """Run KERNEL_DIR's benchmarks against `variant_dir` with `kernels benchmark` in an environment
    layered on `base_python`. Its output (the machine, a table of timings) streams to stderr, and
    its stdout too when `capture` (for --json); `announce` gets a line per package installed."""
    kernel_dir = kernel_dir.resolve()
    benchmark_scripts(kernel_dir)
    metadata = read_metadata(variant_dir)
    backend = metadata.get("backend", {})
    backend = backend.get("type", "cpu") if isinstance(backend, dict) else str(backend)
    needs = kernel_runtime_needs(manifest, backend)
    required = {**dict(needs.why), KERNELS_PIN: "kernels benchmark runs the benchmarks",
                TABULATE: "kernels benchmark prints its table with it"}
    # What the scripts import beyond torch and kernels, resolved as the tests' imports are.
    extras, _ = packages_tests_import(kernel_dir, kernel_dir / "benchmarks", manifest.python_name, base_python)
    for item in planned_installs(base_python, {**extras, **required}):
        announce(f"benchmark environment installs {item['spec']}: {item['why']}")
    python, _, _ = test_environment(base_python, list(required), [e for e in extras if e not in required])

    with tempfile.TemporaryDirectory(prefix="kbuild-bench-") as tmp:
        repo = repo_view(kernel_dir, variant_dir, Path(tmp))
        output = Path(tmp) / "results.json"
        command = [python, "-c", KERNELS_CLI, "benchmark", str(repo), "--iterations", str(iterations),
                   "--warmup", str(warmup), "--output", str(output)]
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")  # the runtime re-hashes variants: no __pycache__ in them
        code, last = _stream(command, kernel_dir, env, capture)
        payload = json.loads(output.read_text()) if code == 0 and output.is_file() else {}
    return BenchRun(manifest.name, variant_dir.name, python, code, payload.get("results", []),
                    payload.get("machineInfo", {}), "" if code == 0 else last)


def _stream(command: list[str], cwd: Path, env: dict, capture: bool) -> tuple[int, str]:
    """Run `command` with its stderr passed through line by line; (exit code, its last
    non-empty stderr line, for the one-line failure)."""
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=sys.stderr if capture else None,
                               stderr=subprocess.PIPE, text=True, errors="replace")
    tail: deque[str] = deque(maxlen=1)
    assert process.stderr is not None
    for line in process.stderr:
        sys.stderr.write(line)
        if line.strip():
            tail.append(line.strip())
    return process.wait(), (tail[0] if tail else "")
