"""`kbuild test`: a kernel's own tests run against its build (tests/fixtures/tested, a noarch
kernel built once per module), by python name and through get_kernel + LOCAL_KERNELS."""

import json
import shutil
from pathlib import Path

import pytest

from conftest import REPO, kbuild, kbuild_in_process
from kernel_builder.checks.kernel_tests import imports_of_tests

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tested"
BROKEN = '''
from tested import scaled_add


def test_broken_on_purpose():
    assert scaled_add(1, 1) == 4, "scaled_add(1, 1) is 3"


def test_broken_hard_codes_cuda():
    import torch

    assert scaled_add(torch.ones(1, device="cuda"), 1).item() == 3
'''


@pytest.fixture(scope="module")
def kernel(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("kt") / "tested"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("build", "__pycache__"))
    return root


def _json_run(kernel: Path, *args: str):
    result = kbuild("test", str(kernel), "--json", *args)
    return result, json.loads(result.stdout)


@pytest.mark.e2e
def test_own_tests_pass_by_python_name_and_get_kernel_with_device_skip_counted(kernel):
    result, data = _json_run(kernel)
    assert result.returncode == 0, result.stderr
    assert set(data) == {"kernel", "variant", "python", "packages", "ok", "exit_code", "counts", "skipped", "failures", "not_installed", "installs"}
    assert (data["kernel"], data["variant"], data["ok"], data["exit_code"]) == ("tested", "torch-cpu", True, 0)
    assert data["counts"] == {"passed": 2, "failed": 0, "errors": 0, "skipped": 1, "needs_device": 1, "failed_needs_device": 0}
    assert data["skipped"] == [{"reason": "needs CUDA", "count": 1}]
    assert "pytest" in data["packages"]
    assert "test_get_kernel_through_local_kernels PASSED" in result.stderr or "2 passed" in result.stderr
    assert not list((kernel / "build" / "torch-cpu").rglob("__pycache__")), "the variant must stay byte-identical"


@pytest.mark.e2e
def test_failure_is_exit_1_with_its_message_and_pytest_args_pass_through(kernel):
    broken = kernel / "tests" / "test_broken.py"
    broken.write_text(BROKEN)
    try:
        result, data = _json_run(kernel, "--", "-k", "broken or python_name")
    finally:
        broken.unlink()
    assert result.returncode == 1, result.stderr
    assert data["counts"]["passed"] == 1 and data["counts"]["failed"] == 2 and data["counts"]["skipped"] == 0
    # The CPU-only torch here has no CUDA: that failure is the machine's, told apart from the kernel's.
    assert data["counts"]["failed_needs_device"] == 1
    failure, cuda = sorted(data["failures"], key=lambda f: "cuda" in f["test"])
    assert failure["test"].endswith("test_broken_on_purpose") and "scaled_add(1, 1) is 3" in failure["message"]
    assert not failure["needs_device"] and cuda["needs_device"] and cuda["test"].endswith("test_broken_hard_codes_cuda")
    summary = kbuild("test", str(kernel), "--", "-k", "python_name")
    assert summary.returncode == 0
    assert "tested (torch-cpu): 1 passed, 0 failed, 0 skipped" in summary.stderr


def test_user_mistakes_are_one_line(kernel, tmp_path):
    no_tests = tmp_path / "tested"
    shutil.copytree(FIXTURE, no_tests, ignore=shutil.ignore_patterns("build", "tests"))
    # A kernel for GPUs only (like kernels-community's Triton kernels) on this CPU machine.
    gpu_only = tmp_path / "gpu-only" / "tested"
    shutil.copytree(FIXTURE, gpu_only, ignore=shutil.ignore_patterns("build"))
    toml = gpu_only / "build.toml"
    toml.write_text(toml.read_text().replace('backends = ["cpu"]', 'backends = ["cuda", "rocm"]'))
    for args, expected in (
        ((str(no_tests),), "no tests/ folder"),
        ((str(gpu_only),), "tested has no cpu backend (it has cuda, rocm): its tests need one of those devices"),
        ((str(kernel), "--variant", "torch299-cxx11-cpu-x86_64-linux"), "torch299-cxx11-cpu-x86_64-linux"),
    ):
        result = kbuild_in_process("test", *args)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr and expected in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_test_imports_leave_out_stdlib_torch_kernel_and_the_repos_own_modules(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tmp_path / "helpers.py").write_text("X = 1\n")  # at the root: pytest runs from there
    (tmp_path / "benchmarks").mkdir()
    (tests / "test_a.py").write_text(
        "import os, torch, yaml, numpy as np\nfrom einops import rearrange\nfrom tested.ops import f\n"
        "from kernels import get_kernel\nimport helpers\nimport benchmarks.bench\nfrom . import conftest\n"
    )
    assert imports_of_tests(tmp_path, tests, "tested") == {m: "tests/test_a.py" for m in ("yaml", "numpy", "einops")}


def test_the_tests_variant_is_this_machines_platform_only():
    """`kbuild test`, `bench` and `dev` build what kbuild's runtime loads here: never another
    platform's variant of the same backend and torch (an aarch64 cross build and its 3 GB
    emulated environment on an x86_64 machine)."""
    from kernel_builder.checks.kernel_tests import machine_selection
    from kernel_builder.kernel.manifest import load_manifest
    from kernel_builder.runtime.system import detect_system

    swiglu = REPO / "examples" / "swiglu"
    selection = machine_selection(load_manifest(swiglu))
    plan = json.loads(kbuild_in_process("plan", str(swiglu), "--matrix", selection, "--json", check=True).stdout)
    system = detect_system()
    assert [job["variant"] for job in plan] == [system.variant_name], plan
