"""What a build shows beyond the live table: CI logs (GitHub Actions fold groups and error
annotations parsed from real compilers' output) and tables that keep variant names whole."""

from __future__ import annotations

import io
import shutil
import subprocess

import pytest
from rich.console import Console
from rich.table import Table

from conftest import kbuild_in_process
from cuda_toolkit import NVCC, needs_nvcc
from kernel_builder.cli.output import print_table
from kernel_builder.compile.diagnostics import CompilerError, compiler_errors, first_error_excerpt
from kernel_builder.runners.progress import GithubProgress, github_error, progress_for

BROKEN = "int scale(int x) {\n  return x * missing_factor;\n}\nint twice(int x) { return x + ; }\n"
LONG_NAMES = ["torch214-cxx11-cu130-x86_64-linux", "torch-2.13-cxx11-cpu-cpython-3.9-abi3-x86_64-linux"]


def _compile(tmp_path, compiler: list[str], name: str) -> str:
    source = tmp_path / name
    source.write_text(BROKEN)
    done = subprocess.run([*compiler, "-c", str(source), "-o", str(tmp_path / "x.o")], capture_output=True, text=True)
    assert done.returncode != 0
    return done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
def test_gcc_errors_are_found_with_file_line_and_column(tmp_path):
    errors = compiler_errors(_compile(tmp_path, ["g++"], "broken.cpp"))
    assert [(e.file, e.line) for e in errors] == [(str(tmp_path / "broken.cpp"), 2), (str(tmp_path / "broken.cpp"), 4)]
    assert "missing_factor" in errors[0].message and errors[0].column == 14


@pytest.mark.e2e
@needs_nvcc
def test_nvcc_errors_are_found_once_each(tmp_path):
    # Two architectures: nvcc's front end may report an error once per architecture.
    log = _compile(tmp_path, [NVCC, "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90"], "broken.cu")
    errors = compiler_errors(log)
    assert [(e.file, e.line) for e in errors] == [(str(tmp_path / "broken.cu"), 2), (str(tmp_path / "broken.cu"), 4)]
    assert "missing_factor" in errors[0].message


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
def test_the_first_gcc_error_comes_with_its_source_line_and_caret_relative_to_the_kernel(tmp_path):
    log = "[1/3] Building CXX object a.o\nFAILED: a.o\n" + _compile(tmp_path, ["g++"], "broken.cpp") + "ninja: build stopped\n"
    excerpt = first_error_excerpt(log, tmp_path)
    assert len(excerpt) == 3, excerpt
    # gcc quotes the name as its locale says: 'x' or ‘x’.
    assert excerpt[0].startswith("broken.cpp:2:14: error: ") and "missing_factor" in excerpt[0]
    assert excerpt[1].strip() == "2 |   return x * missing_factor;" and excerpt[2].strip().startswith("| ")
    assert "^" in excerpt[2]
    assert first_error_excerpt("CMake Error at CMakeLists.txt:3 (project):\n", tmp_path) == []


def test_the_first_nvcc_error_is_spelled_file_line_with_nvccs_source_line_and_caret(tmp_path):
    log = (f"{tmp_path}/k/kernel.cu(2): error: identifier \"missing_factor\" is undefined\n"
           "    return x * missing_factor;\n               ^\n\n1 error detected\n")
    assert first_error_excerpt(log, tmp_path) == [
        'k/kernel.cu:2: error: identifier "missing_factor" is undefined', "    return x * missing_factor;", "               ^",
    ]


def test_annotations_name_the_file_relative_to_the_checkout(tmp_path):
    error = CompilerError(str(tmp_path / "k" / "cpu" / "add.cpp"), 3, 7, "expected ';' before '}' token, 100% sure")
    assert github_error(error, tmp_path) == "::error file=k/cpu/add.cpp,line=3,col=7::expected ';' before '}' token, 100%25 sure"
    outside = CompilerError("/usr/include/c++/12/x.h", 9, None, "a\nb")
    assert github_error(outside, tmp_path) == "::error file=/usr/include/c++/12/x.h,line=9::a%0Ab"


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
def test_github_actions_log_folds_each_job_and_annotates_its_errors(tmp_path, monkeypatch):
    log = tmp_path / "build.log"
    log.write_text("[1/2] Building CXX object broken.cpp.o\n" + _compile(tmp_path, ["g++"], "broken.cpp"))
    ok_log = tmp_path / "ok.log"
    ok_log.write_text("[1/1] Linking CXX shared module _k.abi3.so\n")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    out = io.StringIO()
    progress = progress_for(Console(file=out, width=80, highlight=False), quiet=False)
    assert isinstance(progress, GithubProgress)
    progress.step(LONG_NAMES[0], "compile", ok_log)
    progress.step(LONG_NAMES[1], "compile", log)
    progress.finished(LONG_NAMES[0], "built")
    progress.finished(LONG_NAMES[1], "failed", "compile failed")
    lines = out.getvalue().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("::group::")]
    assert [lines[i].split(":")[4] for i in starts] == LONG_NAMES
    assert lines[starts[0] + 1] == "[1/1] Linking CXX shared module _k.abi3.so" and lines[starts[0] + 2] == "::endgroup::"
    inside = lines[starts[1]:lines.index("::endgroup::", starts[1])]
    assert any("missing_factor" in line for line in inside)
    errors = [i for i, line in enumerate(lines) if line.startswith("::error ")]
    assert [lines[i].split("::")[1] for i in errors] == ["error file=broken.cpp,line=2,col=14", "error file=broken.cpp,line=4,col=31"]
    assert min(errors) > lines.index("::endgroup::", starts[1])  # outside the fold, where they show


def _table(title: str | None = None) -> Table:
    table = Table(title=title, show_edge=False)
    for column in ("variant", "status", "time"):
        table.add_column(column, no_wrap=True)
    for name in LONG_NAMES:
        table.add_row(name, "up-to-date", "0.0 s")
    return table


def test_a_table_in_a_pipe_is_as_wide_as_its_names():
    out = io.StringIO()
    print_table(Console(file=out, width=80, highlight=False, soft_wrap=True), _table())
    text = out.getvalue()
    assert all(name in text for name in LONG_NAMES) and "…" not in text
    assert len({len(line) for line in text.splitlines()}) == 1  # still a table, lines aligned


def test_a_table_on_a_narrow_terminal_becomes_one_line_per_row():
    out = io.StringIO()
    print_table(Console(file=out, width=40, force_terminal=True, color_system=None, soft_wrap=True), _table("2 variants"))
    assert out.getvalue().splitlines() == ["2 variants"] + [f"{name}: up-to-date, 0.0 s" for name in LONG_NAMES]


def test_kbuild_variants_shows_whole_names_at_80_columns():
    result = kbuild_in_process("variants", env={"COLUMNS": "80"})
    assert result.returncode == 0 and "…" not in result.stdout
    assert "torch214-cxx11-cu130-aarch64-linux" in result.stdout
