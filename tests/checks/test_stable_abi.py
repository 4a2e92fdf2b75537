"""Stable-ABI builds, end to end with the real CLI, compilers and torch: a backend named in
`[torch] stable-abi` builds once, as torch-stable-abi{M}{m}-..., against torch's stable
headers (TORCH_TARGET_VERSION) and registers through the stable C shim; the `stable-abi`
check proves the .so uses no other torch symbol, and names the ones an ordinary build uses.

The fixture (tests/fixtures/stable-abi) targets ABI 2.10 and static_asserts that
TORCH_TARGET_VERSION equals its headers' TORCH_VERSION_2_10_0, so the builds also check
the value kbuild passes.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_builder.compile.backends.common import target_version_define
from kernel_builder.runtime.system import host_platform
from kernel_builder.compile.backends.cuda import nvcc_path, nvcc_version
from kernel_builder.checks.variant_checks import FAILED, OK, SKIPPED
from kernel_builder.environments.choice import EnvChooser
from kernel_builder.environments.store import find_env, managed_specs
from kernel_builder.checks.stable_symbols import is_non_stable, is_shim, torch_imports
from kernel_builder.variants import Variant, default_matrix, parse_version
from conftest import REPO, kbuild, kbuild_in_process, optional_module

FIXTURES = REPO / "tests" / "fixtures"
PLATFORM = "-".join(host_platform())
CPU_VARIANT = f"torch-stable-abi210-cpu-{PLATFORM}"
CUDA_VARIANT = "torch-stable-abi210-cu130-x86_64-linux"


def copy_fixture(name: str, dest: Path) -> Path:
    target = dest / name
    shutil.copytree(FIXTURES / name, target, ignore=shutil.ignore_patterns("build", "__pycache__"))
    return target


def check_json(folder: Path) -> dict:
    """`kbuild check --json` of one variant folder: check name -> its result."""
    result = kbuild("check", str(folder), "--json")
    (report,) = json.loads(result.stdout)
    return {c["check"]: c for c in report["checks"]}


def assert_portable_or_local_glibc(abi: dict) -> None:
    """A local build may need this machine's newer glibc (the abi check's business, not ours)."""
    assert abi["status"] == OK or all("GLIBC_" in f for f in abi["findings"]), abi


@pytest.fixture(scope="module")
def kernel(tmp_path_factory) -> Path:
    return copy_fixture("stable-abi", tmp_path_factory.mktemp("stable"))


@pytest.fixture(scope="module")
def cpu_variant(kernel) -> Path:
    kbuild("build", str(kernel), "--variant", CPU_VARIANT, "--no-create-env", check=True)
    return kernel / "build" / CPU_VARIANT


def managed_cuda_reason() -> str | None:
    """Why the CUDA stable variant cannot be built here, or None."""
    nvcc = nvcc_path()
    if nvcc is None or nvcc_version(nvcc) != (13, 0):
        return f"needs nvcc 13.0 (found {nvcc_version(nvcc) if nvcc else 'no nvcc'})"
    if PLATFORM != "x86_64-linux":
        return f"the variant is for x86_64-linux, this machine is {PLATFORM}"
    chooser = EnvChooser.from_options(create=False)
    if not chooser.available(Variant.parse(CUDA_VARIANT)):
        return "needs a managed build environment with a CUDA 13.0 torch >= 2.10 (set KBUILD_ENVS_DIR)"
    return None


# -- the pieces --------------------------------------------------------------------------------
def test_target_version_is_torchs_version_word():
    # torch/headeronly/version.h: major << 56 | minor << 48 (patch and ABI tag 0).
    assert target_version_define((2, 10)) == "TORCH_TARGET_VERSION=0x020a000000000000"
    assert int(target_version_define((2, 13)).split("=")[1], 16) == (2 << 56) | (13 << 48)


@pytest.mark.parametrize(("symbol", "non_stable"), [
    ("_ZN2at10TensorBaseD2Ev", True),  # at::TensorBase::~TensorBase()
    ("_ZNK3c1010TensorImpl15decref_pyobjectEv", True),  # const member
    ("_ZN3c10lsERSoNS_10DeviceTypeE", True),  # c10::operator<<
    ("_ZTIN3c105ErrorE", True),  # typeinfo for c10::Error
    ("_ZNSt6vectorIN3c106IValueESaIS1_EED1Ev", True),  # std::vector<c10::IValue>: c10's layout
    ("_ZN5torch7Library5_implEPKcONS_11CppFunctionENS_17_RegisterOrVerifyE", True),
    ("_ZN4c10d12ProcessGroupD1Ev", True),
    ("THPVariableClass", True),  # torch_python's global
    ("_ZNKSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE2atEm", False),  # std::string::at
    ("_ZNSt6vectorIiSaIiEE2atEm", False),  # std::vector<int>::at
    ("_ZNSo9_M_insertIlEERSoT_", False),
    ("aoti_torch_get_numel", False),
    ("torch_library_impl", False),
    ("PyModule_Create2", False),
    ("cudaGetLastError", False),
])
def test_torch_symbols_outside_the_shim(symbol, non_stable):
    assert is_non_stable(symbol) is non_stable


def test_shim_functions_are_the_extern_c_aoti_and_torch_names():
    assert is_shim("aoti_torch_get_numel") and is_shim("torch_call_dispatcher") and is_shim("aoti_record_function_start")
    assert not is_shim("_ZN5torch7LibraryD1Ev") and not is_shim("memcpy")


# -- plan ----------------------------------------------------------------------------------------
def test_plan_shows_one_stable_variant_per_compute(kernel):
    optional_module("torch")
    rows = json.loads(kbuild_in_process("plan", str(kernel), "--matrix", "all", "--json", "--no-create-env", check=True).stdout)
    names = [row["variant"] for row in rows]
    matrix = [v for v in default_matrix().variants if v.backend in ("cpu", "cuda")]
    assert len({v.torch for v in matrix}) > 1  # the axis that collapses
    # Every torch release of the matrix folds into one variant per compute and platform.
    assert sorted(names) == sorted({f"torch-stable-abi210-{v.compute}-{v.platform}" for v in matrix})
    assert len(names) < len(matrix)
    cpu = next(row for row in rows if row["variant"] == CPU_VARIANT)
    assert cpu["buildable"] and cpu["environment"].startswith("this interpreter"), cpu


def test_plan_without_matrix_builds_the_stable_variants(kernel):
    optional_module("torch")
    rows = json.loads(kbuild_in_process("plan", str(kernel), "--json", "--no-create-env", check=True).stdout)
    by_backend = {row["backend"]: row for row in rows}
    assert by_backend["cpu"]["variant"] == CPU_VARIANT
    assert by_backend["cuda"]["variant"] is None or by_backend["cuda"]["variant"].startswith("torch-stable-abi210-cu")


def test_a_torch_selector_keeps_the_stable_variant_that_loads_on_it(kernel):
    rows = json.loads(kbuild_in_process(
        "plan", str(kernel), "--matrix", f"torch=2.13 backend=cpu arch={host_platform()[0]} os={host_platform()[1]}",
        "--json", "--no-create-env", check=True,
    ).stdout)
    assert [row["variant"] for row in rows] == [CPU_VARIANT]


def test_a_per_torch_variant_of_a_stable_backend_is_refused_in_one_line(kernel):
    result = kbuild_in_process("build", str(kernel), "--variant", f"torch213-cxx11-cpu-{PLATFORM}", "--no-create-env")
    assert result.returncode == 2, result.stderr
    assert f"[torch] stable-abi builds cpu once, as {CPU_VARIANT}" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


# -- the CPU variant, built in this interpreter's torch ----------------------------------------
@pytest.mark.e2e
def test_cpu_variant_builds_with_the_stable_name(cpu_variant):
    libraries = list(cpu_variant.glob("*.so"))
    assert [p.name.startswith("_stable_axpy_cpu_") and p.name.endswith(".abi3.so") for p in libraries] == [True]
    metadata = json.loads((cpu_variant / "metadata.json").read_text())
    assert metadata["name"] == "stable-axpy" and metadata["backend"] == {"type": "cpu"}
    imports = torch_imports(libraries[0])
    assert imports.non_stable == () and "torch_library_impl" in imports.shim


@pytest.mark.e2e
def test_cpu_variant_passes_kbuild_check(cpu_variant):
    checks = check_json(cpu_variant)
    assert checks["stable-abi"]["status"] == OK, checks["stable-abi"]
    assert "stable C shim" in checks["stable-abi"]["detail"]
    assert checks["needed"]["status"] == OK and checks["metadata"]["status"] == OK
    assert checks["import"]["status"] == OK and "registers 1 op: axpy" in checks["import"]["detail"]
    assert_portable_or_local_glibc(checks["abi"])


@pytest.mark.e2e
def test_cpu_variant_loads_in_kernels_and_in_the_kbuild_runtime(cpu_variant, kernel):
    import kernels
    import torch

    from kernel_builder.runtime import load_local

    theirs = kernels.get_local_kernel(pathlib.Path(kernel), backend="cpu")
    assert Path(theirs.__file__).resolve().parent == cpu_variant.resolve()
    x, y = torch.randn(1000), torch.randn(1000)
    torch.testing.assert_close(theirs.axpy(2.5, x, y), 2.5 * x + y)
    ours = load_local(kernel, backend="cpu")
    assert ours is theirs
    with pytest.raises(RuntimeError, match="must be float32"):
        ours.axpy(1.0, x.double(), y.double())


@pytest.mark.e2e
def test_other_variants_skip_the_stable_abi_check(tmp_path, cpu_variant):
    # The same folder under a per-torch name: the check does not apply.
    folder = tmp_path / f"torch213-cxx11-cpu-{PLATFORM}"
    shutil.copytree(cpu_variant, folder)
    assert check_json(folder)["stable-abi"]["status"] == SKIPPED


@pytest.mark.e2e
@pytest.mark.creates_env
def test_a_build_in_a_newer_torch_loads_in_this_one(tmp_path, kernel, cu130_environment):
    """The point of the stable ABI: compiled against a newer torch's headers (a managed
    environment's), loaded by the running, older torch."""
    running = EnvChooser.from_options(create=False).primary
    newer = _managed_newer_than(running.torch)
    if not newer:
        pytest.skip("needs a managed build environment with a torch newer than the running one (set KBUILD_ENVS_DIR)")
    out = tmp_path / "build"
    kbuild("build", str(kernel), "--variant", CPU_VARIANT, "--env", newer[0], "--out", str(out), check=True)
    built_with = json.loads((out / CPU_VARIANT / "metadata.json").read_text())["kbuild"]["torch"]
    probe = (
        "import json, sys, torch; from kernel_builder.runtime import load_local; "
        "m = load_local(sys.argv[1], backend='cpu'); x = torch.arange(4.0); "
        "print(json.dumps([torch.__version__, m.axpy(2.0, x, x).tolist()]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(out / CPU_VARIANT)], capture_output=True, text=True, check=False,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert done.returncode == 0, done.stderr
    loaded_by, result = json.loads(done.stdout.splitlines()[-1])
    assert parse_version(built_with) > parse_version(loaded_by), (built_with, loaded_by)
    assert result == [0.0, 3.0, 6.0, 9.0]


def _managed_newer_than(torch: tuple[int, int]) -> list[str]:
    """Pythons of complete managed environments with a torch newer than `torch`."""
    found = [find_env(spec) for spec in managed_specs() if spec.torch > torch]
    return [env.python for env in found if env is not None]


# -- the CUDA variant, built in a managed CUDA torch -------------------------------------------------
@pytest.mark.e2e
@pytest.mark.cuda
@pytest.mark.creates_env
def test_cuda_variant_builds_once_and_passes_the_check(kernel, cu130_environment):
    reason = managed_cuda_reason()
    if reason:
        pytest.skip(reason)
    kbuild("build", str(kernel), "--variant", CUDA_VARIANT, "--no-create-env", check=True)
    folder = kernel / "build" / CUDA_VARIANT
    metadata = json.loads((folder / "metadata.json").read_text())
    assert metadata["backend"] == {"type": "cuda", "archs": ["8.0"]}
    (library,) = folder.glob("*.so")
    imports = torch_imports(library)
    assert imports.non_stable == () and "aoti_torch_get_current_cuda_stream" in imports.shim
    checks = check_json(folder)
    assert checks["stable-abi"]["status"] == OK, checks["stable-abi"]
    assert checks["needed"]["status"] == OK and checks["metadata"]["status"] == OK
    # Registration needs no GPU: the op registers in the CUDA environment's torch.
    assert checks["import"]["status"] == OK and "registers 1 op: axpy" in checks["import"]["detail"], checks["import"]
    assert_portable_or_local_glibc(checks["abi"])


# -- an ordinary build is flagged -----------------------------------------------------------------
@pytest.mark.e2e
def test_the_check_names_the_torch_symbols_of_an_ordinary_build(built_example, tmp_path):
    """examples/swiglu registers with TORCH_LIBRARY: its CPU .so uses torch's C++ ABI.
    (The session's build of it, shared with the example tests: only read here.)"""
    swiglu = built_example("swiglu")
    built = swiglu.root / "build" / swiglu.rows["cpu"]["variant"]
    (library,) = built.glob("*.so")
    found = torch_imports(library).non_stable
    assert any(name.startswith("torch::Library::") for name in found), found
    assert any(name.startswith("c10::") for name in found) and any(name.startswith("at::") for name in found), found
    assert not any(name.startswith("std::") and "c10::" not in name for name in found), found
    # Under a stable-ABI name, `kbuild check` fails and lists every one of them.
    posing = tmp_path / CPU_VARIANT
    shutil.copytree(built, posing)
    result = kbuild("check", str(posing), "--json")
    assert result.returncode == 1
    (report,) = json.loads(result.stdout)
    check = next(c for c in report["checks"] if c["check"] == "stable-abi")
    assert check["status"] == FAILED
    assert check["detail"].startswith(f"{len(found)} torch symbols outside the stable C shim: ")
    assert check["findings"] == [f"{library.name} uses {name}" for name in found]
