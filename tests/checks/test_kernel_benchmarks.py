"""`kbuild bench` and the benchmarks kbuild ships (`kbuild init`'s template, the examples): scripts
in the format `kernels benchmark` runs (benchmarks/benchmark*.py, kernels.benchmark.Benchmark
classes), run by kernels 0.19.1's own CLI against a build, and by `kbuild bench`.

The template's benchmark runs on its CPU build in tests/scaffold/test_scaffold_e2e.py (the build
that test makes anyway); here the examples' relu benchmark runs on the session's relu build, and
`kbuild bench` on the noarch `tested` fixture (no compiler), to see its failure path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import EXAMPLES, kbuild, kbuild_in_process
from kernel_builder.checks.kernel_benchmarks import KERNELS_CLI, benchmark_scripts, defines_benchmark
from kernel_builder.errors import UsageError
from kernel_builder.scaffold.new_kernel import scaffold

TESTED = Path(__file__).parents[1] / "fixtures" / "tested"
GOOD = '''
import torch
from kernels.benchmark import Benchmark


class ScaledAddBenchmark(Benchmark):
    def setup(self):
        self.x, self.y = torch.randn(64, device=self.device), torch.randn(64, device=self.device)

    def benchmark_add(self):
        self.out = self.kernel.scaled_add(self.x, self.y)

    def verify_add(self):
        return self.x + 2.0 * self.y
'''


def _script(tmp_path: Path, text: str, name: str = "benchmark.py") -> Path:
    (tmp_path / "benchmarks").mkdir(exist_ok=True)
    script = tmp_path / "benchmarks" / name
    script.write_text(textwrap.dedent(text))
    return script


def test_a_repo_without_benchmarks_is_one_line_before_anything_builds(tmp_path):
    result = kbuild_in_process("bench", str(tmp_path))  # no build.toml either: nothing is read before this
    assert result.returncode == 2 and "no benchmarks/benchmark*.py" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_a_standalone_script_kernels_would_fail_on_is_named(tmp_path):
    _script(tmp_path, GOOD)
    _script(tmp_path, "import argparse\nprint('times things its own way')\n", "benchmark_eager.py")
    with pytest.raises(UsageError, match=r"benchmarks/benchmark_eager.py defines no kernels.benchmark.Benchmark subclass"):
        benchmark_scripts(tmp_path)


@pytest.mark.parametrize("text,defines", [
    ("from kernels.benchmark import Benchmark\nclass A(Benchmark): pass\n", True),
    ("import kernels.benchmark\nclass A(kernels.benchmark.Benchmark): pass\n", True),
    ("from kernels.benchmark import Benchmark\nclass Base(Benchmark): pass\nclass A(Base): pass\n", True),
    ("from common import SharedBase\nclass A(SharedBase): pass\n", True),  # perhaps one: kernels decides
    ("class A: pass\nclass B(object): pass\n", False),
    ("def main(): pass\n", False),
])
def test_which_scripts_define_a_benchmark(tmp_path, text, defines):
    assert defines_benchmark(_script(tmp_path, text)) is defines


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.iterdir() if (p / "build.toml").is_file()))
def test_every_example_ships_benchmarks_kernels_runs(example):
    scripts = benchmark_scripts(EXAMPLES / example)
    assert [s.name for s in scripts] == ["benchmark.py"]


def test_kbuild_init_writes_a_benchmark_named_after_the_kernel(tmp_path):
    scaffold(tmp_path / "k", "my-op", ["cpu"])
    (script,) = benchmark_scripts(tmp_path / "k")
    assert "class MyOpBenchmark(Benchmark):" in script.read_text()


@pytest.mark.e2e
def test_kernels_benchmark_runs_the_relu_example_on_its_build(relu_cpu, tmp_path):
    """kernels 0.19.1's own `kernels benchmark PATH` on the session's relu build (read only)."""
    output = tmp_path / "results.json"
    result = subprocess.run(
        [sys.executable, "-c", KERNELS_CLI, "benchmark", str(relu_cpu), "--iterations", "3", "--warmup", "1",
         "--output", str(output)],
        capture_output=True, text=True, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"), check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = {r["workload"]: r for r in json.loads(output.read_text())["results"]}
    assert set(results) == {"ReluBenchmark.fp32", "ReluBenchmark.bf16"}
    assert all(r["verified"] and r["timingResults"]["iterations"] == 3 for r in results.values())
    print(result.stderr)  # the figures (pytest -s shows them)


@pytest.mark.e2e
def test_kbuild_bench_builds_then_runs_and_a_mismatch_is_one_line(tmp_path):
    root = Path(shutil.copytree(TESTED, tmp_path / "tested"))
    _script(root, GOOD.replace("return self.x + 2.0 * self.y", "return self.x - self.y"))
    failed = kbuild("bench", str(root), "--iterations", "2", "--warmup", "0")
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert "tested (torch-cpu): kernels benchmark failed (exit 1): Verification failed for add" in failed.stdout

    _script(root, GOOD)  # the build is up to date now: the second run only benchmarks
    result = kbuild("bench", str(root), "--json", "--iterations", "2", "--warmup", "0")
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(result.stdout)
    assert (data["kernel"], data["variant"], data["ok"]) == ("tested", "torch-cpu", True)
    (row,) = data["results"]
    assert row["workload"] == "ScaledAddBenchmark.add" and row["verified"] is True
    assert row["timingResults"]["iterations"] == 2 and data["machine"]["backend"] == "CPU"
    assert "ScaledAddBenchmark" in result.stderr  # kernels' own table
    assert not list((root / "build").rglob("__pycache__")), "the variant must stay byte-identical"
