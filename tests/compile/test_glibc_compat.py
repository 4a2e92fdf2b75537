"""A local build on this machine's glibc (2.36) stays within manylinux_2_28: glibc_compat.h pins
libm functions whose newer symbol version only dropped the SVID error handling (exp, log,
pow at GLIBC_2.29) to their first version, in every C++ compile and in nvcc's host compiles;
what cannot be pinned fails `kbuild check` with the way out (--runner docker)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import REPO, kbuild, optional_module
from cuda_toolkit import needs_nvcc
from ninja_commands import ninja_commands, only
from kernel_builder.checks.variant_checks import FAILED, OK, check_abi, portability_advice, read_elf_dependencies
from kernel_builder.compile import glibc_compat
from kernel_builder.compile.backends import cuda
from kernel_builder.compile.cmake import _tool
from kernel_builder.compile.job import BuildJob
from kernel_builder.environments.probe import BuildEnv
from kernel_builder.kernel.manifest import load_manifest
from kernel_builder.variants import Variant, arch_variant

CPU_VARIANT = "torch213-cxx11-cpu-x86_64-linux"
LIBM = Path("/lib/x86_64-linux-gnu/libm.so.6")
needs_new_glibc = pytest.mark.skipif(
    not LIBM.exists() or b"GLIBC_2.29" not in LIBM.read_bytes(),
    reason="needs an x86_64 glibc >= 2.29, whose exp/log/pow have a second symbol version",
)

# exp, log and pow of a value only known at run time: the compiler must call libm.
HOST_MATH = """#include <cmath>
double host_math(double x) { return std::exp(x) + std::log(x) + std::pow(x, 1.5); }
"""


def build_toml(name: str, backend: str, sources: list[str], extra: str = "") -> str:
    """A kernel with one binding and one unit of `sources`."""
    return f"""[general]
name = "{name}"
version = 1
license = "MIT"
backends = ["{backend}"]

[torch]
src = ["torch-ext/torch_binding.cpp"]

[kernel.{name}]
backend = "{backend}"
depends = ["torch"]
{extra}src = {json.dumps(sources)}
"""


MATH_KERNEL = {
    "build.toml": build_toml("hostmath", "cpu", ["cpu/host_math.cpp"]),
    "cpu/host_math.cpp": HOST_MATH,
    "torch-ext/torch_binding.cpp": """#include <torch/library.h>
#include "registration.h"
double host_math(double x);
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) { ops.def("host_math(float x) -> float", &host_math); }
REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
""",
    "torch-ext/hostmath/__init__.py": """from ._ops import ops

def host_math(x: float) -> float:
    return ops.host_math(x)
""",
}


def write_kernel(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def glibc_versions(library: Path) -> dict[str, tuple[str, ...]]:
    return {v: s for v, s in read_elf_dependencies(library).symbols_by_version.items() if v.startswith("GLIBC_")}


def newest(versions) -> tuple[int, ...]:
    return max(tuple(int(p) for p in v.removeprefix("GLIBC_").split(".")) for v in versions)


# -- the header ---------------------------------------------------------------------------------


def test_the_header_pins_every_listed_function_per_architecture():
    text = glibc_compat.header_text()
    for arch, version in (("__x86_64__", "GLIBC_2.2.5"), ("__aarch64__", "GLIBC_2.17")):
        block = text.split(f"defined({arch})", 1)[1].split("#e", 1)[0]
        assert [line for line in block.splitlines() if line] == [
            f'__asm__(".symver {name},{name}@{version}");' for name in glibc_compat.PINNED
        ]
    assert "!defined(__CUDA_ARCH__)" in text  # nvcc's device passes see no asm for the host


@needs_new_glibc
def test_the_first_versions_are_this_machines(tmp_path):
    """Each pin names a version libm.so.6 really has (objdump lists it beside the new one)."""
    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is not installed")
    dynamic = subprocess.run(["objdump", "-T", str(LIBM)], capture_output=True, text=True, check=True).stdout
    versions = {}
    for line in dynamic.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            versions.setdefault(parts[-1], set()).add(parts[-2].strip("()"))
    for name in ("exp", "exp2", "log", "log2", "pow"):
        assert {"GLIBC_2.2.5", "GLIBC_2.29"} <= versions[name], (name, versions.get(name))


# -- the check's message -----------------------------------------------------------------------


def test_a_symbol_that_cannot_be_pinned_points_to_the_manylinux_image():
    advice = portability_advice("GLIBC_2.34", ("pthread_create", "pthread_join"))
    assert advice == (
        "pthread_create, pthread_join cannot be pinned to an older version; "
        "build with `kbuild build --runner docker` (the manylinux_2_28 image)"
    )
    # One unpinnable symbol among pinned ones is enough to need the image; only it is named.
    assert portability_advice("GLIBC_2.29", ("exp", "totalorder")).startswith("totalorder cannot be pinned")
    # libstdc++'s versions are never pinned, whatever the symbol's name.
    assert "--runner docker" in portability_advice("GLIBCXX_3.4.30", ("exp",))


def test_a_pinned_symbol_asks_for_a_rebuild():
    assert portability_advice("GLIBC_2.29", ("exp", "log", "pow")) == (
        "kbuild pins exp, log, pow to an older version in the builds it generates (glibc_compat.h); "
        "rebuild the variant with `kbuild build`"
    )


@pytest.mark.e2e
@needs_new_glibc
def test_a_library_compiled_without_the_header_fails_with_the_rebuild_hint(tmp_path):
    """The same source compiled by hand binds GLIBC_2.29; with the header, GLIBC_2.2.5."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    source = tmp_path / "host_math.cpp"
    source.write_text(HOST_MATH)
    folder = tmp_path / CPU_VARIANT
    folder.mkdir()
    plain = folder / "plain.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-O2", "-o", str(plain), str(source)], check=True)
    assert set(glibc_versions(plain)["GLIBC_2.29"]) == {"exp", "log", "pow"}

    abi = check_abi(folder, Variant.parse(CPU_VARIANT))
    assert abi.status == FAILED
    assert abi.findings == (
        "plain.so needs GLIBC_2.29 (exp, log, pow) > 2.28: kbuild pins exp, log, pow to an older version "
        "in the builds it generates (glibc_compat.h); rebuild the variant with `kbuild build`",
    )

    header = tmp_path / glibc_compat.HEADER
    header.write_text(glibc_compat.header_text())
    subprocess.run(["g++", "-shared", "-fPIC", "-O2", f"-include{header}", "-o", str(plain), str(source)], check=True)
    assert set(glibc_versions(plain)["GLIBC_2.2.5"]) >= {"exp", "log", "pow"}
    assert check_abi(folder, Variant.parse(CPU_VARIANT)).status == OK


# -- real builds --------------------------------------------------------------------------------


@pytest.mark.e2e
@needs_new_glibc
def test_a_cpu_kernel_calling_exp_log_pow_builds_within_manylinux_2_28(tmp_path):
    root = write_kernel(tmp_path / "hostmath", MATH_KERNEL)
    result = kbuild("build", str(root), "--variant", CPU_VARIANT, "--strict-abi", "--max-jobs", "1")
    assert result.returncode == 0, result.stderr[-3000:]

    checked = kbuild("check", str(root), "--json")
    assert checked.returncode == 0, checked.stdout[-3000:]
    [report] = json.loads(checked.stdout)
    abi = {c["check"]: c for c in report["checks"]}["abi"]
    assert abi["status"] == OK and "manylinux_2_28: GLIBC <= 2.28" in abi["detail"], abi

    folder = root / "build" / CPU_VARIANT
    [library] = folder.glob("*.abi3.so")
    versions = glibc_versions(library)
    assert newest(versions) <= (2, 28), versions
    assert {"exp", "log", "pow"} <= set(versions["GLIBC_2.2.5"]), versions

    # Same results as the interpreter's own libm, through the pinned symbols.
    value = subprocess.run(
        [sys.executable, "-c", "import sys; from kernel_builder.runtime import load_local; "
         "print(repr(load_local(sys.argv[1]).host_math(2.5)))", str(root)],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), check=False,
    )
    assert value.returncode == 0, value.stderr[-2000:]
    assert float(value.stdout.strip()) == math.exp(2.5) + math.log(2.5) + math.pow(2.5, 1.5)


def cuda_job(tmp_path: Path, files: dict[str, str]) -> BuildJob:
    """A CUDA 13.0 job for a kernel, against this interpreter's torch headers labelled as a
    CUDA build: enough to generate and configure the project, and to compile torch-free .cu files."""
    root = write_kernel(tmp_path / "hostcuda", files)
    torch_dir = Path(importlib.util.find_spec("torch").origin).parent  # found, not imported: fast
    env = BuildEnv(sys.executable, "3.11", sysconfig.get_paths()["include"], "2.14.1", str(torch_dir), True, cuda="13.0")
    variant = arch_variant(env.torch, "cuda", (13, 0), "x86_64", "linux")
    return BuildJob(load_manifest(root), env, variant, "cuda", "abc1234", None, root / "build", tmp_path / "work")


CUDA_KERNEL = {
    "build.toml": build_toml("hostcuda", "cuda", ["hostcuda/launch.cu", "hostcuda/host_math.cpp"], 'cuda-capabilities = ["9.0"]\n'),
    "hostcuda/launch.cu": """#include <cmath>
__global__ void scale(float* x, float by) { x[threadIdx.x] *= by; }
double launch_scale(double x) { return std::exp(x) * std::pow(x, 0.5); }
""",
    "hostcuda/host_math.cpp": HOST_MATH,
    "torch-ext/torch_binding.cpp": "// not compiled by this test\n",
    "torch-ext/hostcuda/__init__.py": "",
}


def test_cuda_host_compiles_get_the_header(tmp_path, monkeypatch):
    """Without nvcc: the generated spec passes the header to the C++ compiler and, through
    -Xcompiler, to nvcc's host compiler, and writes it beside CMakeLists.txt."""
    optional_module("torch")
    monkeypatch.setattr(cuda, "nvcc_path", lambda: "/usr/local/cuda/bin/nvcc")
    monkeypatch.setattr(cuda, "nvcc_architectures", lambda nvcc: frozenset({"9.0"}))
    monkeypatch.setattr(cuda, "nvcc_include_dirs", lambda nvcc: ())
    job = cuda_job(tmp_path, CUDA_KERNEL)
    spec = cuda.CudaBackend().compile_spec(job)
    header = job.work_dir / glibc_compat.HEADER
    options = dict(spec.language_options)
    # nvcc's is relative to the build folder, where its compiles run (no work-folder path for sccache to hash).
    assert options["CXX"][-1] == f"-include{header}" and options["CUDA"][-1] == f"-Xcompiler=-include../{glibc_compat.HEADER}"
    assert options["CUDA"][:len(cuda.NVCC_FLAGS)] == cuda.NVCC_FLAGS  # the backend's own options stay first
    assert dict(spec.files)[glibc_compat.HEADER] == glibc_compat.header_text()
    # GCC (the host compiler here) for both: one copy of each static per kernel (compile.unique_symbols).
    assert "-fno-gnu-unique" in options["CXX"] and "-Xcompiler=-fno-gnu-unique" in options["CUDA"]


@pytest.mark.e2e
@needs_nvcc
@needs_new_glibc
def test_nvcc_host_code_binds_the_old_versions(tmp_path):
    """Configured for real: Ninja's command for each source carries the header, and the .cu
    object that nvcc compiles calls exp and pow at GLIBC_2.2.5."""
    job = cuda_job(tmp_path, CUDA_KERNEL)
    spec = cuda.CudaBackend().compile_spec(job)
    header = job.work_dir / glibc_compat.HEADER
    lines = ninja_commands(spec, job.work_dir)
    cu = only(lines, f"-c {job.manifest.root / 'hostcuda' / 'launch.cu'}")
    assert f"-Xcompiler=-include../{glibc_compat.HEADER}" in cu, cu
    assert f"-include{header}" in only(lines, f"-c {job.manifest.root / 'hostcuda' / 'host_math.cpp'}")

    build = job.work_dir / "build"
    [target] = [t.split(":")[0] for t in subprocess.run(
        [_tool("ninja"), "-C", str(build), "-t", "targets", "all"], capture_output=True, text=True, check=True,
    ).stdout.splitlines() if t.split(":")[0].endswith("launch.cu.o")]
    subprocess.run([_tool("ninja"), "-C", str(build), target], capture_output=True, text=True, check=True)
    symbols = subprocess.run(["nm", str(build / target)], capture_output=True, text=True, check=True).stdout
    undefined = {line.split()[-1] for line in symbols.splitlines() if line.split()[0] == "U"}
    assert {"exp@GLIBC_2.2.5", "pow@GLIBC_2.2.5"} <= undefined, undefined
