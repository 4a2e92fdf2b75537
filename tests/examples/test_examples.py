"""The examples, built for real, called against PyTorch references.

swiglu, layer-norm and flash-attn are built as docs/examples.md builds them, on session copies (what
the docs and the acceptance criteria run; their backends and own test suites: test_example_kernels.py);
`examples/relu` is the public kernel-builder ecosystem's layout, built unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import copy_example, kbuild, run_example_tests, optional_module
from kernel_builder.compile.backends.cuda import nvcc_path
from kernel_builder.compile.backends.rocm_toolchain import hipcc_path

torch = optional_module("torch")

pytestmark = pytest.mark.e2e

TORCH_TAG = "torch{}{}".format(*torch.__version__.split(".")[:2])
CPU_VARIANT = f"{TORCH_TAG}-cxx11-cpu-x86_64-linux"
CUDA_VARIANT = "torch214-cxx11-cu130-x86_64-linux"  # nvcc 13.0's newest torch in the default matrix


@pytest.fixture(scope="module")
def swiglu(built_example) -> Path:
    return built_example("swiglu").root


def test_swiglu_builds_the_cpu_variant_in_place(swiglu):
    folder = swiglu / "build" / CPU_VARIANT
    metadata = json.loads((folder / "metadata.json").read_text())
    assert metadata["id"].startswith("_swiglu_cpu_")
    assert (folder / f"{metadata['id']}.abi3.so").exists()
    assert (folder / "layers.py").exists() or (folder / "layers").is_dir()


def test_the_runtime_guides_loading_snippet_runs_as_written(swiglu, tmp_path):
    """The runtime guide's "Loading a build" block, verbatim, in a fresh interpreter, from a folder
    whose examples/swiglu is this session's build (it once failed with kernels 0.19.1)."""
    import re
    import subprocess
    import sys

    guide = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "runtime.md").read_text()
    section = guide.split("## Loading a build", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "swiglu").symlink_to(swiglu)
    done = subprocess.run([sys.executable, "-c", snippet + "\nprint('ran', swiglu.__name__)\n"], cwd=tmp_path,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.startswith("ran"), done.stderr[-3000:]


def test_swiglu_loads_through_both_loaders_and_matches_the_reference(swiglu):
    import kernels

    from kernel_builder.runtime import load_local

    ours = load_local(swiglu)
    theirs = kernels.get_local_kernel(swiglu, backend="cpu")
    F = torch.nn.functional
    activations = {
        "silu_and_mul": F.silu,
        "gelu_and_mul": F.gelu,
        "gelu_tanh_and_mul": lambda g: F.gelu(g, approximate="tanh"),
    }
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2), (torch.float16, 2e-3)):
        x = torch.randn(7, 2 * 129, dtype=dtype)
        d = x.shape[-1] // 2
        for name, act in activations.items():
            expected = (act(x[..., :d].float()) * x[..., d:].float()).to(dtype)
            for module in (ours, theirs):
                torch.testing.assert_close(getattr(module, name)(x), expected, atol=tol, rtol=tol)


def test_swiglu_gradients_flow_through_the_kernel(swiglu):
    from kernel_builder.runtime import load_local

    module = load_local(swiglu)
    x = torch.randn(5, 2 * 33, dtype=torch.float64)
    for name, approximate in (("silu_and_mul", None), ("gelu_and_mul", "none"), ("gelu_tanh_and_mul", "tanh")):
        x32 = x.float().requires_grad_()
        getattr(module, name)(x32).sum().backward()
        ref = x.clone().requires_grad_()
        g, u = ref[..., :33], ref[..., 33:]
        act = torch.nn.functional.silu(g) if approximate is None else torch.nn.functional.gelu(g, approximate=approximate)
        (act * u).sum().backward()
        torch.testing.assert_close(x32.grad.double(), ref.grad, atol=1e-5, rtol=1e-5)


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


def test_swiglu_noop_rebuild_compiles_nothing(swiglu):
    library = next((swiglu / "build" / CPU_VARIANT).glob("*.so"))
    before = library.stat().st_mtime_ns
    result = kbuild("build", str(swiglu), check=True)
    assert "up-to-date" in result.stdout and "building" not in result.stderr
    assert library.stat().st_mtime_ns == before  # its time: benchmarks/, not a timed test


def test_layer_norm_matches_the_reference(built_example):
    from kernel_builder.runtime import load_local

    ln = load_local(built_example("layer-norm").root)
    x, residual = torch.randn(7, 129, dtype=torch.bfloat16), torch.randn(7, 129, dtype=torch.bfloat16)
    w, b = torch.randn(129, dtype=torch.bfloat16), torch.randn(129, dtype=torch.bfloat16)
    expected = torch.nn.functional.layer_norm(x.float(), (129,), w.float(), b.float(), 1e-5).to(torch.bfloat16)
    torch.testing.assert_close(ln.layer_norm(x, w, b, 1e-5), expected, rtol=2e-2, atol=2e-2)
    # The prenorm pattern: norm(x + residual), and the new residual x + residual.
    out, new_residual = ln.rms_norm(x, w, 1e-6, residual=residual)
    summed = x.float() + residual.float()
    expected = (summed * torch.rsqrt(summed.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(torch.bfloat16)
    torch.testing.assert_close(out, expected, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(new_residual, summed.to(torch.bfloat16))


def test_flash_attn_matches_sdpa(built_example):
    from kernel_builder.runtime import load_local

    fa = load_local(built_example("flash-attn").root)
    q = torch.randn(2, 37, 8, 64)
    k, v = torch.randn(2, 53, 2, 64), torch.randn(2, 53, 2, 64)  # GQA: 4 q heads per kv head
    out, lse = fa.flash_attn_func(q, k, v, return_lse=True)
    expected = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), enable_gqa=True).transpose(1, 2)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k.repeat_interleave(4, dim=2)) * 64**-0.5
    torch.testing.assert_close(lse, scores.logsumexp(-1), atol=1e-4, rtol=1e-4)


def test_public_kernel_builder_repo_builds_unchanged(tmp_path):
    """relu as the ecosystem writes it: five backends, one binding with #if defined(X_KERNEL)."""
    root = copy_example("relu", tmp_path)
    result = kbuild("build", str(root), "--json", check=True)
    rows = {r["backend"]: r for r in json.loads(result.stdout)["jobs"]}
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
