"""`kbuild dev` on a copy of examples/relu (its CPU variant): it builds into kbuild's cache,
never KERNEL_DIR/build, runs the tests and prints their summary; a syntax error is its first
compiler error with the source line; --watch reruns on a save (bounded by --max-runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copy_example, kbuild, kbuild_in_process

SOURCE = "relu_cpu/relu_cpu.cpp"
GOOD_LINE = "    const acc_t v = static_cast<acc_t>(in[i]);"


@pytest.fixture(scope="module")
def relu(tmp_path_factory):
    return copy_example("relu", tmp_path_factory.mktemp("dev"))


@pytest.mark.e2e
def test_dev_builds_outside_the_kernel_runs_its_tests_and_prints_the_summary(relu):
    result = kbuild("dev", str(relu))
    assert result.returncode == 0, result.stderr
    assert "relu (torch213-cxx11-cpu-x86_64-linux): 14 passed, 0 failed, 0 skipped" in result.stderr
    assert not (relu / "build").exists(), "the dev build must leave KERNEL_DIR/build alone"
    data = json.loads(kbuild("dev", str(relu), "--json", "--", "-k", "matches_torch", check=True).stdout)
    assert data["ok"] and data["build"]["status"] == "up-to-date"
    assert data["tests"]["counts"]["passed"] == 9 and data["tests"]["counts"]["failed"] == 0
    # Its own work tree beside the release build's, which it leaves alone.
    work = list(Path(os.environ["KBUILD_CACHE_DIR"], "work").glob("*/torch213-cxx11-cpu-x86_64-linux-dev/build.log"))
    assert any(str(relu) in w.read_text() for w in work)


@pytest.mark.e2e
def test_a_syntax_error_is_its_first_compiler_error_in_four_lines(relu):
    source = relu / SOURCE
    good = source.read_text()
    source.write_text(good.replace(GOOD_LINE, "    const acc_t v = static_cast<acc_t>(in[i]) + undeclared_x;"))
    try:
        result = kbuild("dev", str(relu))
    finally:
        source.write_text(good)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert len(lines) <= 4, result.stderr
    assert lines[1].startswith(f"{SOURCE}:21:49: error: ") and "undeclared_x" in lines[1]
    assert "undeclared_x;" in lines[2] and "^" in lines[3]
    assert not (relu / "build").exists()


@pytest.mark.e2e
def test_watch_reruns_after_a_save(relu):
    source = relu / SOURCE
    good = source.read_text()
    command = [sys.executable, "-m", "kernel_builder.cli", "dev", str(relu), "--watch", "--max-runs", "2"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    seen = []
    try:
        for line in process.stderr:
            seen.append(line)
            if "watching for saves" in line and sum("watching" in s for s in seen) == 1:
                # A comment: the dev build recompiles this one file.
                source.write_text(good.replace("// Below this many", "// (saved) Below this many"))
        code = process.wait(timeout=600)
    finally:
        process.kill()
        source.write_text(good)
    text = "".join(seen)
    assert code == 0, text
    assert f"--- saved {SOURCE}" in text and text.count("14 passed, 0 failed") == 2
    assert "dev: stopped after 2 rounds" in text


def test_user_mistakes_are_one_line(tmp_path, relu):
    no_tests = copy_example("relu", tmp_path)
    (no_tests / "tests" / "test_relu.py").unlink()
    (no_tests / "tests" / "conftest.py").unlink()
    (no_tests / "tests").rmdir()
    for args, expected in (
        ((str(no_tests),), "no tests/ folder"),
        ((str(relu), "--cuda-arch", "sm_90"), "--cuda-arch takes compute capabilities"),
        ((str(relu), "--watch", "--max-runs", "0"), "--max-runs"),
    ):
        result = kbuild_in_process("dev", *args)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr and expected in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
