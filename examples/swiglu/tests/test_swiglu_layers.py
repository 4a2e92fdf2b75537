"""Layer tests: the kernel's layers against transformers-style reference modules.

The layers only provide ``forward``; as with ``kernels.kernelize``, they are
called with a reference module as ``self``: ``layers.LlamaMLP.forward(ref, x)``.
"""

import inspect

import pytest
import torch
import torch.nn.functional as F
from torch import nn


class RefSiluAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]


class RefLlamaMLP(nn.Module):
    """Same structure and attribute names as transformers' LlamaMLP."""

    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.act_fn = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class ScaledLinear(nn.Linear):
    """An nn.Linear subclass with a different forward (stands in for e.g. LoRA)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2.0 * super().forward(x)


# Tolerances relative to the output scale; 16-bit runs differ by rounding of the
# intermediate activations.
TOL = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
    torch.float16: dict(rtol=5e-3, atol=5e-3),
}


def make_mlp(dtype, bias=False, hidden=48, intermediate=100, seed=0):
    torch.manual_seed(seed)
    return RefLlamaMLP(hidden, intermediate, bias=bias).to(dtype)


@pytest.mark.parametrize("layer_name", ["SiluAndMul", "LlamaMLP"])
def test_layers_follow_kernels_rules(swiglu, layer_name):
    """No constructor and no members besides forward and the two flags."""
    cls = getattr(swiglu.layers, layer_name)
    assert issubclass(cls, nn.Module)
    assert cls.__init__ is nn.Module.__init__
    base = {name for name, _ in inspect.getmembers(nn.Module)}
    extra = {name for name, _ in inspect.getmembers(cls)} - base
    assert extra <= {"has_backward", "can_torch_compile"}, extra
    assert list(inspect.signature(cls.forward).parameters) == ["self", "x"]
    assert cls.has_backward is False
    assert cls.can_torch_compile is False
    assert set(swiglu.layers.__all__) == {"SiluAndMul", "LlamaMLP"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(1, 2 * 7), (5, 2 * 33), (2, 3, 2 * 64)], ids=str)
def test_silu_and_mul_layer(swiglu, dtype, shape):
    ref = RefSiluAndMul()
    x = (torch.randn(shape) * 3).to(dtype)
    expected = ref(x)
    torch.testing.assert_close(swiglu.layers.SiluAndMul.forward(ref, x), expected, **TOL[dtype])
    torch.testing.assert_close(swiglu.layers.SiluAndMul()(x), expected, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("shape", [(1, 48), (7, 48), (2, 5, 48)], ids=str)
def test_llama_mlp_inference(swiglu, dtype, bias, shape):
    """Under inference_mode the projections write into one buffer (no cat)."""
    mlp = make_mlp(dtype, bias=bias)
    x = torch.randn(shape).to(dtype)
    with torch.inference_mode():
        expected = mlp(x)
        got = swiglu.layers.LlamaMLP.forward(mlp, x)
    assert got.shape == expected.shape and got.dtype == dtype
    torch.testing.assert_close(got, expected, **TOL[dtype])


def test_llama_mlp_with_grad_enabled(swiglu):
    """With parameters that require grad it takes the concatenating path."""
    mlp = make_mlp(torch.float32, bias=True)
    x = torch.randn(3, 4, 48)
    expected = mlp(x)
    got = swiglu.layers.LlamaMLP.forward(mlp, x)
    torch.testing.assert_close(got, expected, **TOL[torch.float32])


def test_llama_mlp_with_linear_subclass(swiglu):
    """Projections that are not plain nn.Linear are called, not bypassed."""
    mlp = make_mlp(torch.float32)
    scaled = ScaledLinear(48, 100, bias=False)
    scaled.weight = mlp.up_proj.weight
    mlp.up_proj = scaled
    x = torch.randn(6, 48)
    with torch.no_grad():
        torch.testing.assert_close(swiglu.layers.LlamaMLP.forward(mlp, x), mlp(x), **TOL[torch.float32])


def test_kernelize_llama_mlp(swiglu, kernel_root):
    """End to end through kernels.kernelize with a local layer repository."""
    kernels = pytest.importorskip("kernels")

    @kernels.use_kernel_forward_from_hub("LlamaMLP")
    class HubLlamaMLP(RefLlamaMLP):
        pass

    torch.manual_seed(0)
    model = nn.Sequential(HubLlamaMLP(48, 100), HubLlamaMLP(48, 100))
    x = torch.randn(4, 48)
    with torch.inference_mode():
        expected = model(x)
    mapping = {"LlamaMLP": {"cpu": kernels.LocalLayerRepository(repo_path=kernel_root, layer_name="LlamaMLP")}}
    with kernels.use_kernel_mapping(mapping, inherit_mapping=False):
        kernels.kernelize(model, mode=kernels.Mode.INFERENCE, device="cpu", use_fallback=False)
    assert all(m.forward.__func__ is not RefLlamaMLP.forward for m in model)
    with torch.inference_mode():
        torch.testing.assert_close(model(x), expected, **TOL[torch.float32])
