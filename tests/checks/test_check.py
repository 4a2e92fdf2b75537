"""`kbuild check` and kernel_builder.checks.variant_checks, on variant folders made here with gcc (a library
that needs GLIBC_2.34, one that needs only old versions, one that links an unexpected
library) and on real builds for the import smoke test."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, kbuild, kbuild_in_process
from kernel_builder.checks.variant_checks import FAILED, OK, SKIPPED, check_abi, check_metadata, check_needed, read_elf_dependencies
from kernel_builder.runtime.digest import hash_variant
from kernel_builder.variants import Variant
from cuda_toolkit import needs_nvcc

CPU_VARIANT = "torch213-cxx11-cpu-x86_64-linux"

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not found: cannot compile the test libraries")

# pthread_create moved into libc at glibc 2.34, so it binds to GLIBC_2.34 when built here (glibc 2.36).
NEW_GLIBC_SOURCE = """
#include <pthread.h>
static void *run(void *arg) { return arg; }
int start(void) { pthread_t t; return pthread_create(&t, 0, run, 0); }
"""
# memcpy@GLIBC_2.14 and __cxa_finalize@GLIBC_2.2.5: within manylinux_2_28.
OLD_GLIBC_SOURCE = """
#include <string.h>
void copy(char *d, const char *s, unsigned long n) { memcpy(d, s, n); }
"""


def compile_library(source: str, out: Path, *link: str) -> Path:
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), str(src), *link], check=True)
    src.unlink()
    return out


def stamp(folder: Path, **overrides) -> dict:
    """A complete metadata.json whose digests match the folder, as kbuild's stamp writes it."""
    metadata = {
        "id": "_probe_cpu_0000000",
        "name": "probe",
        "version": 1,
        "license": "MIT",
        "python-depends": [],
        "backend": {"type": "cpu"},
        "digest": {"algorithm": "sha256", "files": hash_variant(folder)},
        "provenance": {"kernel-builder": {"version": "test"}},
        **overrides,
    }
    (folder / "metadata.json").write_text(json.dumps(metadata, indent=2))
    return metadata


def make_variant(root: Path, source: str, name: str = CPU_VARIANT, link: tuple[str, ...] = ()) -> Path:
    folder = root / "build" / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text('"""A test variant: a library without ops."""\n')
    compile_library(source, folder / "_probe_cpu_0000000.abi3.so", *link)
    stamp(folder)
    return folder


def check_json(target: Path) -> tuple[int, list[dict]]:
    result = kbuild("check", str(target), "--json")
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout)


def by_check(report: dict) -> dict[str, dict]:
    return {c["check"]: c for c in report["checks"]}


@pytest.mark.e2e
@needs_gcc
def test_the_test_libraries_need_what_they_claim(tmp_path):
    """Cross-check the ELF reader with objdump, where binutils is installed."""
    new = compile_library(NEW_GLIBC_SOURCE, tmp_path / "new.so")
    old = compile_library(OLD_GLIBC_SOURCE, tmp_path / "old.so")
    assert read_elf_dependencies(new).symbols_by_version["GLIBC_2.34"] == ("pthread_create",)
    assert set(read_elf_dependencies(old).symbols_by_version) == {"GLIBC_2.14", "GLIBC_2.2.5"}
    assert read_elf_dependencies(old).needed == ("libc.so.6",)
    if shutil.which("objdump"):
        dynamic = subprocess.run(["objdump", "-T", str(new)], capture_output=True, text=True, check=True).stdout
        assert any("GLIBC_2.34" in line and "pthread_create" in line for line in dynamic.splitlines()), dynamic


@pytest.mark.e2e
@needs_gcc
def test_kbuild_check_flags_glibc_2_34_and_a_tampered_file(tmp_path):
    """The acceptance line: the real CLI names GLIBC_2.34 and the modified file, exit 1."""
    folder = make_variant(tmp_path, NEW_GLIBC_SOURCE)
    with (folder / "_probe_cpu_0000000.abi3.so").open("ab") as f:
        f.write(b"\0")

    result = kbuild("check", str(tmp_path), env={"COLUMNS": "300"})  # wide enough that no finding wraps
    assert result.returncode == 1, result.stdout + result.stderr
    assert "needs GLIBC_2.34 (pthread_create) > 2.28" in result.stdout, result.stdout
    assert "_probe_cpu_0000000.abi3.so: hash mismatch" in result.stdout, result.stdout

    code, reports = check_json(tmp_path)
    assert code == 1
    [report] = reports
    checks = by_check(report)
    assert report["variant"] == CPU_VARIANT and report["ok"] is False
    assert checks["abi"]["status"] == FAILED
    assert checks["abi"]["findings"] == [
        "_probe_cpu_0000000.abi3.so needs GLIBC_2.34 (pthread_create) > 2.28: pthread_create cannot be pinned to an "
        "older version; build with `kbuild build --runner docker` (the manylinux_2_28 image)"
    ]
    # On another glibc, the detail says the policy the variant does meet.
    assert checks["abi"]["detail"].endswith("; as built, the variant meets manylinux_2_34 (glibc 2.34)")
    assert checks["needed"]["status"] == OK
    assert checks["metadata"]["status"] == FAILED
    # The variant imports, but a library that registers nothing is a failed smoke test.
    assert checks["import"]["status"] == FAILED
    assert "registers no ops" in checks["import"]["detail"], checks["import"]


@pytest.mark.e2e
@needs_gcc
def test_a_library_needing_only_old_versions_passes(tmp_path):
    folder = make_variant(tmp_path, OLD_GLIBC_SOURCE)
    variant = Variant.parse(folder.name)
    abi = check_abi(folder, variant)
    assert abi.status == OK, abi
    assert "GLIBC <= 2.28, GLIBCXX <= 3.4.24, CXXABI <= 1.3.11" in abi.detail
    assert check_needed(folder, variant).status == OK
    assert check_metadata(folder).status == OK


@pytest.mark.e2e
@needs_gcc
def test_extra_missing_and_modified_files_are_findings(tmp_path):
    folder = make_variant(tmp_path, OLD_GLIBC_SOURCE)
    (folder / "notes.txt").write_text("added after the build\n")
    (folder / "__init__.py").unlink()
    result = check_metadata(folder)
    assert result.status == FAILED
    assert result.findings == (
        "__init__.py: missing file (listed in the digest, absent from the folder)",
        "notes.txt: unknown file (in the folder, not listed in the digest)",
    )


@pytest.mark.e2e
@needs_gcc
def test_incomplete_metadata_is_a_finding(tmp_path):
    folder = make_variant(tmp_path, OLD_GLIBC_SOURCE)
    metadata = json.loads((folder / "metadata.json").read_text())
    del metadata["license"]
    (folder / "metadata.json").write_text(json.dumps(metadata))
    result = check_metadata(folder)
    assert result.status == FAILED
    assert "lacks the required key 'license'" in result.detail


@pytest.mark.e2e
@needs_gcc
def test_an_unexpected_needed_library_is_named(tmp_path):
    helper = compile_library("int helper(void) { return 1; }\n", tmp_path / "libhelper.so")
    folder = make_variant(
        tmp_path, "int helper(void);\nint call(void) { return helper(); }\n", link=(f"-L{tmp_path}", "-lhelper")
    )
    assert helper.parent != folder
    result = check_needed(folder, Variant.parse(folder.name))
    assert result.status == FAILED
    assert result.findings[0] == "_probe_cpu_0000000.abi3.so needs unexpected libhelper.so"


@pytest.mark.e2e
@needs_gcc
def test_backend_runtimes_are_allowed_only_for_their_backend(tmp_path):
    """libcudart is fine in a CUDA variant and unexpected in a CPU one."""
    fake = compile_library("int cudaFake(void) { return 0; }\n", tmp_path / "libcudart.so")
    source = "int cudaFake(void);\nint call(void) { return cudaFake(); }\n"
    link = (f"-L{tmp_path}", "-lcudart")
    cpu = make_variant(tmp_path, source, link=link)
    cuda = make_variant(tmp_path, source, name="torch214-cxx11-cu130-x86_64-linux", link=link)
    assert fake.exists()
    assert check_needed(cuda, Variant.parse(cuda.name)).status == OK
    assert check_needed(cpu, Variant.parse(cpu.name)).status == FAILED


@pytest.mark.e2e
def test_a_darwin_variant_skips_the_elf_checks_and_its_import(tmp_path):
    folder = tmp_path / "torch213-metal-aarch64-darwin"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "_probe_metal_0000000.abi3.so").write_bytes(b"\xcf\xfa\xed\xfe not ELF: a Mach-O header")
    stamp(folder, backend={"type": "metal"})
    code, [report] = check_json(folder)
    checks = by_check(report)
    assert code == 0, report
    assert checks["abi"]["status"] == SKIPPED and "darwin variant" in checks["abi"]["detail"]
    assert checks["needed"]["status"] == SKIPPED
    assert checks["metadata"]["status"] == OK
    assert checks["import"]["status"] == SKIPPED
    assert "built for aarch64-darwin" in checks["import"]["detail"]


@pytest.mark.e2e
def test_a_variant_without_its_environment_skips_the_import_with_the_reason(tmp_path):
    folder = tmp_path / "torch212-cxx11-cu126-x86_64-linux"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    stamp(folder, backend={"type": "cuda", "archs": ["8.0"]})
    code, [report] = check_json(folder)
    imported = by_check(report)["import"]
    assert code == 0, report
    assert imported["status"] == SKIPPED
    assert "no build environment with torch 2.12 (CUDA 12.6) here" in imported["detail"], imported


@pytest.mark.e2e
def test_a_pure_python_kernel_built_by_kbuild_passes_every_check(tmp_path):
    out = tmp_path / "build"
    kbuild("build", str(REPO / "tests" / "fixtures" / "fused"), "--out", str(out), check=True)
    code, [report] = check_json(out)
    checks = by_check(report)
    assert code == 0, report
    assert report["variant"] == "torch-cpu"
    assert checks["abi"]["status"] == SKIPPED and "pure-Python" in checks["abi"]["detail"]
    assert checks["metadata"]["status"] == OK
    assert checks["import"]["status"] == OK and "pure Python, no ops" in checks["import"]["detail"]


@pytest.fixture
def cpu_variant(built_example, tmp_path) -> Path:
    """A real compiled CPU variant: a copy of the swiglu example's (built once per session)."""
    existing = built_example("swiglu").root / "build" / CPU_VARIANT
    return Path(shutil.copytree(existing, tmp_path / CPU_VARIANT, ignore=shutil.ignore_patterns("__pycache__")))


@pytest.mark.e2e
def test_a_compiled_cpu_variant_imports_and_registers_its_ops(cpu_variant):
    code, [report] = check_json(cpu_variant)
    checks = by_check(report)
    assert checks["import"]["status"] == OK, checks["import"]
    assert "registers" in checks["import"]["detail"]
    assert checks["metadata"]["status"] == OK
    assert checks["needed"]["status"] == OK, checks["needed"]
    # g++ 12 on glibc 2.36 would bind __libc_single_threaded@GLIBC_2.32; kbuild's
    # glibc_compat (kernel_builder/compile/glibc_compat.py) keeps the local build within manylinux_2_28.
    assert checks["abi"]["status"] == OK, checks["abi"]
    assert code == 0


@pytest.mark.e2e
@pytest.mark.creates_env
@needs_nvcc
def test_a_cuda_variant_imports_in_its_managed_environment(built_example, tmp_path):
    """No GPU needed: the cu130 variant imports in the torch214-cu130 environment."""
    name = "torch214-cxx11-cu130-x86_64-linux"
    existing = built_example("swiglu").root / "build" / name
    folder = shutil.copytree(existing, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    _, [report] = check_json(folder)
    imported = by_check(report)["import"]
    assert imported["status"] == OK, imported
    assert "torch214-cu130" in imported["detail"] and "registers" in imported["detail"], imported


def _with_file(path: Path, returned: Path) -> Path:
    path.write_text("")
    return returned


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda tmp: tmp / "missing", "does not exist"),
        (lambda tmp: _with_file(tmp / "file.txt", tmp / "file.txt"), "is not a folder"),
        (lambda tmp: tmp, "no variant folders in"),
        (lambda tmp: _with_file(tmp / "build.toml", tmp), "build the kernel first (kbuild build)"),
    ],
    ids=["missing", "file", "empty", "unbuilt-kernel"],
)
def test_user_errors_are_one_line_and_exit_2(tmp_path, make, expected):
    result = kbuild_in_process("check", str(make(tmp_path)))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kbuild: error:") and expected in lines[0], result.stderr


def test_an_import_killed_by_a_signal_says_so_not_the_last_stderr_line(tmp_path):
    from kernel_builder.checks.variant_checks import _import_error

    stderr = "torch/_subclasses/functional_tensor.py:283: UserWarning: Failed to initialize NumPy\n  cpu = ...\n"
    assert _import_error(stderr, tmp_path, -8) == "the import crashed: SIGFPE (signal 8)"
    assert _import_error("Traceback\nImportError: libfoo.so: cannot open\n", tmp_path, 1) == "ImportError: libfoo.so: cannot open"


def test_an_import_failing_in_a_dependency_is_told_apart_from_one_in_the_kernel(tmp_path):
    """A noarch variant for another device whose dependency does not import here (PyPI's `nki`
    placeholder raises off Neuron machines) is skipped; one failing in the kernel's own files is not."""
    from kernel_builder.checks.variant_checks import _foreign_failure

    kernel = tmp_path / "relu_nki"
    kernel.mkdir()
    dep = "/env/lib/python3.11/site-packages/nki/__init__.py"
    stderr = (f'Traceback (most recent call last):\n  File "{kernel}/__init__.py", line 1, in <module>\n    import nki\n'
              f'  File "{dep}", line 1, in <module>\nImportError: WRONG PACKAGE. Please install the package from Neuron Repository\n')
    assert _foreign_failure(stderr, kernel) == f"ImportError: WRONG PACKAGE. Please install the package from Neuron Repository (in {dep})"
    own = f'Traceback (most recent call last):\n  File "{kernel}/_impl.py", line 8, in <module>\nNameError: name \'x\' is not defined\n'
    assert _foreign_failure(own, kernel) is None


@needs_gcc
def test_no_import_check_runs_every_other_check(tmp_path):
    """`kbuild check --no-import-check`: what an emulated aarch64 import (a minute or more) would
    cost is skipped; the file checks still run and still fail the variant they fail."""
    folder = make_variant(tmp_path, OLD_GLIBC_SOURCE)
    args = ("check", str(folder), "--json", "--no-import-check")
    done = kbuild_in_process(*args)
    (report,) = json.loads(done.stdout)
    assert done.returncode == 0 and "import" not in by_check(report), report
    assert set(by_check(report)) >= {"abi", "needed", "metadata"}
    (folder / "notes.txt").write_text("added after the build\n")
    done = kbuild_in_process(*args)
    (report,) = json.loads(done.stdout)
    assert done.returncode == 1 and by_check(report)["metadata"]["status"] == FAILED
