"""Layer tests: the kernel's layers against the modules they replace.

The layers only provide ``forward``; as with ``kernels.kernelize``, they are
called with a reference module as ``self``: ``layers.LlamaMLP.forward(ref, x)``.
The reference modules are re-implemented here (transformers' LlamaMLP and
vLLM-style activation-and-mul modules); transformers' own activation classes
are used where it is installed.
"""

import inspect

import pytest
import torch
import torch.nn.functional as F
from swiglu_reference import DTYPES
from torch import nn

LAYERS = ["SiluAndMul", "GeluAndMul", "GeluTanhAndMul", "LlamaMLP"]


class RefSiluAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]


class RefGeluAndMul(nn.Module):
    """vLLM's GeluAndMul: the GELU variant is an attribute."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        return F.gelu(x[..., :d], approximate=self.approximate) * x[..., d:]


class RefGeluTanhAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        return F.gelu(x[..., :d], approximate="tanh") * x[..., d:]


class RefLlamaMLP(nn.Module):
    """Same structure and attribute names as transformers' LlamaMLP."""

    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False, act_fn=None):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.act_fn = nn.SiLU() if act_fn is None else act_fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class ScaledLinear(nn.Linear):
    """An nn.Linear subclass with a different forward (stands in for e.g. LoRA)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2.0 * super().forward(x)


class SiLUSubclass(nn.SiLU):
    """A SiLU subclass that computes something else: must not be fused."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x) + 1.0


# Tolerances relative to the output scale; 16-bit runs differ by rounding of the
# intermediate activations.
TOL = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
    torch.float16: dict(rtol=5e-3, atol=5e-3),
}


def make_mlp(dtype=torch.float32, bias=False, act_fn=None, hidden=48, intermediate=100, seed=0):
    torch.manual_seed(seed)
    return RefLlamaMLP(hidden, intermediate, bias=bias, act_fn=act_fn).to(dtype)


# act_fn values -> whether LlamaMLP fuses them. The torch modules and functions
# always; transformers' activation classes where it is installed.
ACT_FNS = {
    "nn.SiLU": (lambda: nn.SiLU(), True),
    "F.silu": (lambda: F.silu, True),
    "nn.GELU": (lambda: nn.GELU(), True),
    "nn.GELU-tanh": (lambda: nn.GELU(approximate="tanh"), True),
    "F.gelu": (lambda: F.gelu, True),
    "nn.ReLU": (lambda: nn.ReLU(), False),
    "SiLU-subclass": (lambda: SiLUSubclass(), False),
}
TRANSFORMERS_ACTS = {
    "silu": True,
    "gelu": True,
    "gelu_python": True,
    "gelu_pytorch_tanh": True,
    "gelu_new": True,
    "gelu_fast": True,
    "gelu_accurate": True,
    "quick_gelu": False,
    "gelu_10": False,
}


@pytest.mark.parametrize("layer_name", LAYERS)
def test_layers_follow_kernels_rules(swiglu, layer_name):
    """No constructor and no members besides forward and the two flags."""
    cls = getattr(swiglu.layers, layer_name)
    assert issubclass(cls, nn.Module)
    assert cls.__init__ is nn.Module.__init__
    base = {name for name, _ in inspect.getmembers(nn.Module)}
    extra = {name for name, _ in inspect.getmembers(cls)} - base
    assert extra <= {"has_backward", "can_torch_compile"}, extra
    assert list(inspect.signature(cls.forward).parameters) == ["self", "x"]
    assert cls.has_backward is True
    assert cls.can_torch_compile is False
    assert set(swiglu.layers.__all__) == set(LAYERS)


ACT_LAYERS = [
    ("SiluAndMul", RefSiluAndMul),
    ("GeluAndMul", RefGeluAndMul),
    ("GeluTanhAndMul", RefGeluTanhAndMul),
    ("GeluAndMul", lambda: RefGeluAndMul("tanh")),  # reads the module's `approximate`
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 2 * 7), (5, 2 * 33), (2, 3, 2 * 64)], ids=str)
@pytest.mark.parametrize("layer_name,make_ref", ACT_LAYERS, ids=["silu", "gelu", "gelu_tanh", "gelu-approximate-tanh"])
def test_activation_layers(swiglu, layer_name, make_ref, dtype, shape):
    ref = make_ref()
    layer = getattr(swiglu.layers, layer_name)
    x = (torch.randn(shape) * 3).to(dtype)
    expected = ref(x)
    torch.testing.assert_close(layer.forward(ref, x), expected, **TOL[dtype])
    if not hasattr(ref, "approximate") or ref.approximate == "none":
        torch.testing.assert_close(layer()(x), expected, **TOL[dtype])


@pytest.mark.parametrize("layer_name,make_ref", ACT_LAYERS, ids=["silu", "gelu", "gelu_tanh", "gelu-approximate-tanh"])
def test_activation_layers_backward(swiglu, layer_name, make_ref):
    ref = make_ref()
    x = torch.randn(4, 2 * 40, requires_grad=True)
    grad_out = torch.randn(4, 40)
    getattr(swiglu.layers, layer_name).forward(ref, x).backward(grad_out)
    x_ref = x.detach().clone().requires_grad_()
    ref(x_ref).backward(grad_out)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
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


def check_act_fn(swiglu, act_fn, fused):
    assert (swiglu.layers._fused_activation(act_fn) is not None) is fused
    mlp = make_mlp(act_fn=act_fn)
    x = torch.randn(2, 3, 48)
    with torch.no_grad():
        torch.testing.assert_close(swiglu.layers.LlamaMLP.forward(mlp, x), mlp(x), **TOL[torch.float32])


@pytest.mark.parametrize("act", list(ACT_FNS))
def test_llama_mlp_picks_the_activation(swiglu, act):
    make, fused = ACT_FNS[act]
    check_act_fn(swiglu, make(), fused)


@pytest.mark.parametrize("act", list(TRANSFORMERS_ACTS))
def test_llama_mlp_with_transformers_activations(swiglu, act):
    activations = pytest.importorskip("transformers.activations")
    check_act_fn(swiglu, activations.ACT2FN[act], TRANSFORMERS_ACTS[act])


@pytest.mark.parametrize("act", ["nn.SiLU", "nn.GELU", "nn.GELU-tanh", "nn.ReLU"])
def test_llama_mlp_training(swiglu, act):
    """With gradients recorded: the same loss and parameter gradients as the module."""
    mlp = make_mlp(act_fn=ACT_FNS[act][0](), bias=True)
    x = torch.randn(3, 4, 48, requires_grad=True)
    swiglu.layers.LlamaMLP.forward(mlp, x).square().mean().backward()
    got = [p.grad.clone() for p in mlp.parameters()] + [x.grad.clone()]
    mlp.zero_grad()
    x.grad = None
    mlp(x).square().mean().backward()
    expected = [p.grad for p in mlp.parameters()] + [x.grad]
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-6)


def test_llama_mlp_with_linear_subclass(swiglu):
    """Projections that are not plain nn.Linear are called, not bypassed."""
    mlp = make_mlp(torch.float32)
    scaled = ScaledLinear(48, 100, bias=False)
    scaled.weight = mlp.up_proj.weight
    mlp.up_proj = scaled
    x = torch.randn(6, 48)
    with torch.no_grad():
        torch.testing.assert_close(swiglu.layers.LlamaMLP.forward(mlp, x), mlp(x), **TOL[torch.float32])


@pytest.mark.parametrize("mode", ["INFERENCE", "TRAINING"])
def test_kernelize_llama_mlp(swiglu, kernel_root, mode, test_device):
    """End to end through kernels.kernelize with a local layer repository."""
    kernels = pytest.importorskip("kernels")

    @kernels.use_kernel_forward_from_hub("LlamaMLP")
    class HubLlamaMLP(RefLlamaMLP):
        pass

    torch.manual_seed(0)
    model = nn.Sequential(HubLlamaMLP(48, 100), HubLlamaMLP(48, 100, act_fn=nn.GELU(approximate="tanh")))
    x = torch.randn(4, 48)
    expected = model(x)
    mapping = {"LlamaMLP": {test_device: kernels.LocalLayerRepository(repo_path=kernel_root, layer_name="LlamaMLP")}}
    with kernels.use_kernel_mapping(mapping, inherit_mapping=False):
        kernels.kernelize(model, mode=getattr(kernels.Mode, mode), device=test_device, use_fallback=False)
    assert all(m.forward.__func__ is not RefLlamaMLP.forward for m in model)
    if mode == "INFERENCE":
        with torch.inference_mode():
            torch.testing.assert_close(model(x), expected, **TOL[torch.float32])
        return
    x.requires_grad_()
    model(x).sum().backward()
    kernel_grad = x.grad.clone()
    x.grad = None
    y = x
    for m in model:
        y = RefLlamaMLP.forward(m, y)
    y.sum().backward()
    torch.testing.assert_close(kernel_grad, x.grad, rtol=1e-4, atol=1e-6)
