"""The examples, built for real and checked through both loaders and their own tests.

`examples/swiglu` is built in place (what the README and the acceptance criteria run);
`examples/relu` is the public kernel-builder ecosystem's layout, built unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import EXAMPLES, copy_example, kbuild
from kernel_builder.backends.cuda import nvcc_path
from kernel_builder.backends.rocm import hipcc_path

TORCH_TAG = "torch{}{}".format(*torch.__version__.split(".")[:2])
CPU_VARIANT = f"{TORCH_TAG}-cxx11-cpu-x86_64-linux"
CUDA_VARIANT = "torch214-cxx11-cu130-x86_64-linux"  # nvcc 13.0's newest torch in the default matrix


def run_example_tests(root: Path) -> subprocess.CompletedProcess:
    """The example's own test suite, in a fresh interpreter, against its build/."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests")],
        cwd=root, capture_output=True, text=True, check=False,
        env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"),
    )


@pytest.fixture(scope="module")
def swiglu() -> Path:
    root = EXAMPLES / "swiglu"
    result = kbuild("build", str(root), check=True)
    if nvcc_path():
        assert CUDA_VARIANT in result.stderr, result.stderr  # see tests/test_cuda.py
    else:
        assert "skipped cuda" in result.stderr
    return root


def test_swiglu_builds_the_cpu_variant_in_place(swiglu):
    folder = swiglu / "build" / CPU_VARIANT
    metadata = json.loads((folder / "metadata.json").read_text())
    assert metadata["id"].startswith("_swiglu_cpu_")
    assert (folder / f"{metadata['id']}.abi3.so").exists()
    assert (folder / "layers.py").exists() or (folder / "layers").is_dir()


def test_swiglu_loads_through_both_loaders_and_matches_the_reference(swiglu):
    import kernels

    from kernel_builder.runtime import load_local

    ours = load_local(swiglu)
    theirs = kernels.get_local_kernel(swiglu, backend="cpu")
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2), (torch.float16, 2e-3)):
        x = torch.randn(7, 2 * 129, dtype=dtype)
        d = x.shape[-1] // 2
        expected = (torch.nn.functional.silu(x[..., :d].float()) * x[..., d:].float()).to(dtype)
        for module in (ours, theirs):
            torch.testing.assert_close(module.silu_and_mul(x), expected, atol=tol, rtol=tol)


def test_swiglu_layer_kernelizes_a_module_with_kernels(swiglu):
    from kernels import LocalLayerRepository, Mode, kernelize, use_kernel_forward_from_hub, use_kernel_mapping

    @use_kernel_forward_from_hub("SiluAndMul")
    class SiluAndMul(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            d = x.shape[-1] // 2
            return torch.nn.functional.silu(x[..., :d]) * x[..., d:]

    model = torch.nn.Sequential(torch.nn.Linear(32, 64), SiluAndMul())
    x = torch.randn(3, 32)
    expected = model(x)
    mapping = {"SiluAndMul": {"cpu": LocalLayerRepository(swiglu, layer_name="SiluAndMul")}}
    with use_kernel_mapping(mapping, inherit_mapping=False):
        kernelize(model, mode=Mode.INFERENCE, device="cpu")
    assert model[1].forward.__func__ is not SiluAndMul.forward
    torch.testing.assert_close(model(x), expected, atol=1e-5, rtol=1e-5)


def test_swiglu_own_test_suite_passes(swiglu):
    result = run_example_tests(swiglu)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and " skipped" not in result.stdout.splitlines()[-1]


def test_swiglu_noop_rebuild_compiles_nothing(swiglu):
    library = next((swiglu / "build" / CPU_VARIANT).glob("*.so"))
    before = library.stat().st_mtime_ns
    start = time.perf_counter()
    result = kbuild("build", str(swiglu), check=True)
    elapsed = time.perf_counter() - start
    assert "up-to-date" in result.stderr and "building" not in result.stderr
    assert library.stat().st_mtime_ns == before
    assert elapsed < 5, elapsed  # the benchmark script reports the real figure


def test_public_kernel_builder_repo_builds_unchanged(tmp_path):
    """relu as the ecosystem writes it: five backends, one binding with #if defined(X_KERNEL)."""
    root = copy_example("relu", tmp_path)
    result = kbuild("build", str(root), "--json", check=True)
    rows = {r["backend"]: r for r in json.loads(result.stdout)}
    assert rows["cpu"]["status"] == "built" and rows["cpu"]["variant"] == CPU_VARIANT
    if nvcc_path():
        assert rows["cuda"]["status"] == "built" and rows["cuda"]["variant"] == CUDA_VARIANT
        metadata = json.loads((root / "build" / CUDA_VARIANT / "metadata.json").read_text())
        assert metadata["backend"]["archs"][0] == "7.5" and metadata["backend"]["archs"][-1] == "12.1"
    else:
        assert rows["cuda"]["status"] == "skipped" and "nvcc" in rows["cuda"]["detail"]
    if hipcc_path():
        assert rows["rocm"]["status"] == "checked", rows["rocm"]
        assert rows["rocm"]["detail"].startswith("compiled, not linked: no ROCm torch in the build environment")
        assert "gfx90a" in rows["rocm"]["detail"] and "relu_cuda/relu_kernel.cu" in rows["rocm"]["detail"]
    else:
        assert rows["rocm"]["status"] == "skipped" and "hipcc" in rows["rocm"]["detail"]
    assert rows["metal"]["status"] == "skipped" and "xcrun not found" in rows["metal"]["detail"]
    assert rows["xpu"]["status"] == "skipped" and "icpx not found" in rows["xpu"]["detail"]
    import kernels

    relu = kernels.get_local_kernel(root, backend="cpu")
    x = torch.randn(64)
    torch.testing.assert_close(relu.relu(x), torch.relu(x))
    test_run = run_example_tests(root)
    assert test_run.returncode == 0, test_run.stdout[-3000:] + test_run.stderr[-2000:]
