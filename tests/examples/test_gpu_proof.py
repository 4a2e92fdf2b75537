"""benchmarks/gpu/run.sh, the prepared GPU proof: its dry run (the CPU variants, tiny shapes)
goes through every step here, so the script cannot rot between the rare GPU sessions."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "benchmarks" / "gpu" / "run.sh"
EXAMPLES = {"relu", "swiglu", "layer-norm", "flash-attn"}

from conftest import optional_module

def run(*args: str, python: str = sys.executable, wheels: Path | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """run.sh with `python`; `wheels`: the carried wheels' folder (default: none)."""
    env = dict(os.environ, KBUILD_PROOF_PYTHON=python, KBUILD_PROOF_WHEELS=str(wheels or "/nonexistent"))
    return subprocess.run(["bash", str(RUN), *args], capture_output=True, text=True, check=False, env=env, cwd=cwd)


@pytest.mark.e2e
def test_dry_run_builds_tests_and_times_every_example(tmp_path, built_example, relu_cpu):
    # The script's work folder holds the examples this session has built already (the
    # examples' own tests build them): its builds find them up to date, and the rest of
    # the steps run in full.
    work = tmp_path / "work"
    work.mkdir()
    (work / "relu").symlink_to(relu_cpu)
    for name in EXAMPLES - {"relu"}:
        (work / name).symlink_to(built_example(name).root)
    # The examples' own suites run in test_example_kernels.py: here only relu's, the smallest,
    # goes through the script's test step, in a run of its own, given relative --out and --work
    # (issue 35: the tests run in the example's folder, where a relative path named nothing).
    tested = run("--dry-run", "--examples", "relu", "--out", "relu", "--work", "work", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-3000:]
    (step,) = json.loads((tmp_path / "relu" / "proof.json").read_text())["tests"]
    assert step["example"] == "relu" and step["ok"], step  # its suite ran, on the requested device
    assert step["counts"]["passed"] > 0 and step["counts"]["failures"] == 0, step

    result = run("--dry-run", "--skip-tests", "--out", str(tmp_path), "--work", str(work))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "proof.json").read_text())
    assert report["dry_run"] and report["device"] == "cpu"
    assert {b["example"] for b in report["builds"] if b["ok"]} == EXAMPLES and report["tests"] == []
    memory = report["memory_bound"]
    assert {(r["op"], r["direction"], r["dtype"]) for r in memory} == {
        (op, d, dt) for op in ("rms_norm", "layer_norm", "silu_and_mul") for d in ("fwd", "bwd") for dt in ("bf16", "fp32")}
    for row in memory:
        assert row["ok"] and row["kernel_ms"] > 0 and set(row["baselines_ms"]) == {"eager", "compile"}, row
        # ok: the result is within the dtype's tolerance of the reference (cases.TOLERANCE).
        assert 0 < row["copy_share"] and 0 <= row["error"] < 1, row
    attention = report["attention"]
    assert len(attention) == 2 * 2 * 2 * 2 * 2  # dtypes x head dims x seqlens x causal x direction
    for row in attention:
        assert row["ok"] and set(row["baselines_ms"]) == {"sdpa"}, row
    # One table: a line per row, with the figures.
    assert "flash-attn against SDPA's flash backend" in result.stdout
    assert result.stdout.count("rms_norm") >= 4


def test_without_a_gpu_it_says_to_use_the_dry_run(tmp_path):
    optional_module("torch")
    result = run("--out", str(tmp_path))
    assert result.returncode == 2
    assert "torch sees no CUDA device; run with --dry-run" in result.stderr
    assert not (tmp_path / "proof.json").exists()


def test_a_python_lacking_kbuilds_needs_is_named_in_one_line(tmp_path):
    bare = tmp_path / "bare-python"
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S -I \"$@\"\n")
    bare.chmod(0o755)
    result = run("--dry-run", python=str(bare))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "lacks: torch typer" in line and ".whl/" in line


def test_carried_wheels_that_cannot_install_are_named_in_one_line(tmp_path):
    (tmp_path / "broken-1.0-py3-none-any.whl").write_bytes(b"not a zip")
    result = run("--dry-run", wheels=tmp_path)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"gpu-proof: cannot install the wheels in {tmp_path} with {sys.executable}: ")
