"""The layers against the modules they replace.

The layers only provide ``forward``; as ``kernels.kernelize`` does, they are
called with the replaced module as ``self``: ``layers.RMSNorm.forward(module, x)``.
transformers is not needed: LlamaRMSNorm and LlamaMLP are re-implemented from
its source in norm_reference.py (and checked against the real class when
transformers happens to be installed).
"""

import inspect
import types

import pytest
import torch
from torch import nn

from norm_reference import LlamaMLP, LlamaRMSNorm

LAYERS = ["RMSNorm", "LayerNorm", "RMSNormMLP"]

TOL = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.bfloat16: dict(rtol=2 ** -7, atol=1e-2),
    torch.float16: dict(rtol=2 ** -10, atol=1e-3),
    torch.float64: dict(rtol=1e-6, atol=1e-6),
}


@pytest.mark.parametrize("name", LAYERS)
def test_layers_follow_the_kernels_rules(ln, name):
    """No constructor, no members besides forward and the two flags, and the
    forward signature of the replaced module."""
    cls = getattr(ln.layers, name)
    assert issubclass(cls, nn.Module)
    assert cls.__init__ is nn.Module.__init__
    base = {n for n, _ in inspect.getmembers(nn.Module)}
    assert {n for n, _ in inspect.getmembers(cls)} - base <= {"has_backward", "can_torch_compile"}
    assert cls.has_backward is True and cls.can_torch_compile is False
    expected = {"RMSNorm": ["self", "hidden_states"], "LayerNorm": ["self", "input"], "RMSNormMLP": ["self", "hidden_states"]}
    assert list(inspect.signature(cls.forward).parameters) == expected[name]
    assert set(LAYERS) <= set(ln.layers.__all__)


# ---- RMSNorm ---------------------------------------------------------------------


def make_rms_norm(hidden, dtype, weight_dtype=None, eps=1e-6, seed=0):
    torch.manual_seed(seed)
    module = LlamaRMSNorm(hidden, eps=eps)
    with torch.no_grad():
        module.weight.normal_(1.0, 0.2)
    return module.to(weight_dtype or dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("shape", [(1, 1, 7), (2, 5, 64), (3, 4097)], ids=str)
def test_rms_norm_layer(ln, dtype, shape):
    module = make_rms_norm(shape[-1], dtype)
    x = torch.randn(shape).to(dtype)
    with torch.no_grad():
        got = ln.layers.RMSNorm.forward(module, x)
        expected = module(x)
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, **TOL[dtype])


def test_rms_norm_layer_mixed_dtypes(ln):
    """An fp32 weight with bf16 activations promotes to fp32, as in eager."""
    module = make_rms_norm(64, torch.bfloat16, weight_dtype=torch.float32)
    x = torch.randn(4, 64).to(torch.bfloat16)
    with torch.no_grad():
        got = ln.layers.RMSNorm.forward(module, x)
        expected = module(x)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, **TOL[torch.float32])


def test_rms_norm_layer_matches_transformers(ln):
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRMSNorm as HFLlamaRMSNorm

    module = HFLlamaRMSNorm(256, eps=1e-5).to(torch.bfloat16)
    with torch.no_grad():
        module.weight.normal_(1.0, 0.2)
    x = torch.randn(3, 9, 256).to(torch.bfloat16)
    with torch.no_grad():
        got = ln.layers.RMSNorm.forward(module, x)
        expected = module(x)
    assert transformers.__version__
    # The same double rounding: equal except where rstd differs in its last bit.
    assert (got == expected).float().mean().item() > 0.999
    torch.testing.assert_close(got, expected, **TOL[torch.bfloat16])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rms_norm_layer_gradients(ln, dtype):
    module = make_rms_norm(48, dtype)
    x = torch.randn(6, 48).to(dtype).requires_grad_()
    dy = torch.randn(6, 48).to(dtype)
    got = torch.autograd.grad(ln.layers.RMSNorm.forward(module, x), (x, module.weight), dy)
    expected = torch.autograd.grad(module(x), (x, module.weight), dy)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=5e-2 if dtype == torch.bfloat16 else 1e-4, atol=5e-2 if dtype == torch.bfloat16 else 1e-4)


# ---- LayerNorm -----------------------------------------------------------------------


def make_layer_norm(shape, dtype, seed=0, **kwargs):
    torch.manual_seed(seed)
    module = nn.LayerNorm(shape, **kwargs)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.5, 0.3)
    return module.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize(
    "config",
    [
        dict(shape=(64,), x=(4, 64)),
        dict(shape=(129,), x=(2, 3, 129), eps=1e-6),
        dict(shape=(5, 7), x=(3, 5, 7)),
        dict(shape=(33,), x=(8, 33), elementwise_affine=False),
        dict(shape=(33,), x=(8, 33), bias=False),
        dict(shape=(16,), x=(0, 16)),
    ],
    ids=["64", "129-eps", "5x7", "no-affine", "no-bias", "empty"],
)
def test_layer_norm_layer(ln, dtype, config):
    kwargs = {k: v for k, v in config.items() if k not in ("shape", "x")}
    module = make_layer_norm(config["shape"], dtype, **kwargs)
    x = torch.randn(config["x"]).to(dtype)
    with torch.no_grad():
        got = ln.layers.LayerNorm.forward(module, x)
        expected = module(x)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got, expected, **TOL[dtype])


def test_layer_norm_layer_mixed_dtypes(ln):
    """fp32 parameters with a bf16 input: the eager op (the kernel takes
    parameters in the input's dtype)."""
    module = make_layer_norm((32,), torch.float32)
    x = torch.randn(4, 32).to(torch.bfloat16)
    with torch.no_grad():
        torch.testing.assert_close(ln.layers.LayerNorm.forward(module, x), module(x), rtol=0, atol=0)


def test_layer_norm_layer_gradients(ln):
    module = make_layer_norm((5, 7), torch.float32)
    x = torch.randn(3, 5, 7, requires_grad=True)
    dy = torch.randn(3, 5, 7)
    params = (x, module.weight, module.bias)
    got = torch.autograd.grad(ln.layers.LayerNorm.forward(module, x), params, dy)
    expected = torch.autograd.grad(module(x), params, dy)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)


# ---- RMSNormMLP (the fusion layer) ---------------------------------------------------


class FusedReference(nn.Module):
    """The two modules RMSNormMLP fuses: post-attention norm, then the MLP."""

    def __init__(self, hidden, intermediate, dtype, bias=False, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.norm = make_rms_norm(hidden, dtype, seed=seed)
        self.mlp = LlamaMLP(hidden, intermediate, bias=bias).to(dtype)

    def forward(self, x):
        return self.mlp(self.norm(x))

    def layout(self):
        """What kbuild's RMSNormMLPLayout holds: the attributes the kernel
        layer's forward reads (by reference)."""
        return types.SimpleNamespace(
            weight=self.norm.weight,
            variance_epsilon=self.norm.variance_epsilon,
            gate_proj=self.mlp.gate_proj,
            up_proj=self.mlp.up_proj,
            down_proj=self.mlp.down_proj,
        )


MLP_TOL = {
    torch.float32: dict(rtol=1e-4, atol=1e-4),
    torch.bfloat16: dict(rtol=3e-2, atol=3e-2),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("shape", [(1, 64), (7, 64), (2, 5, 64)], ids=str)
def test_rms_norm_mlp_inference(ln, dtype, bias, shape):
    """Under inference mode the projections write into one buffer (no cat)."""
    ref = FusedReference(64, 172, dtype, bias=bias)
    x = torch.randn(shape).to(dtype)
    with torch.inference_mode():
        got = ln.layers.RMSNormMLP.forward(ref.layout(), x)
        expected = ref(x)
    assert got.shape == expected.shape and got.dtype == dtype
    torch.testing.assert_close(got, expected, **MLP_TOL[dtype])


def test_rms_norm_mlp_with_the_stamped_layout(ln):
    """kbuild stamps RMSNormMLPLayout from kbuild.toml; transformers builds it
    from the two modules, in order, and kernelize swaps in RMSNormMLP.forward."""
    layout_cls = getattr(ln.layers, "RMSNormMLPLayout", None)
    if layout_cls is None:
        pytest.skip("this build has no RMSNormMLPLayout (built without kbuild.toml)")
    ref = FusedReference(64, 172, torch.bfloat16)
    layout = layout_cls(ref.norm, ref.mlp)
    assert layout.weight is ref.norm.weight and layout.down_proj is ref.mlp.down_proj
    x = torch.randn(3, 64).to(torch.bfloat16)
    with torch.inference_mode():
        torch.testing.assert_close(ln.layers.RMSNormMLP.forward(layout, x), ref(x), **MLP_TOL[torch.bfloat16])


def test_rms_norm_mlp_gradients(ln):
    """With parameters that require grad it concatenates, and every parameter
    gets its gradient (the norm's and silu_and_mul's backward)."""
    ref = FusedReference(32, 80, torch.float32, bias=True)
    x = torch.randn(3, 4, 32, requires_grad=True)
    dy = torch.randn(3, 4, 32)
    params = [x] + list(ref.parameters())
    got = torch.autograd.grad(ln.layers.RMSNormMLP.forward(ref.layout(), x), params, dy)
    expected = torch.autograd.grad(ref(x), params, dy)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)


def test_rms_norm_mlp_with_linear_subclass(ln):
    """Projections that are not plain nn.Linear are called, not bypassed."""

    class ScaledLinear(nn.Linear):
        def forward(self, x):
            return 2.0 * super().forward(x)

    ref = FusedReference(32, 80, torch.float32)
    scaled = ScaledLinear(32, 80, bias=False)
    scaled.weight = ref.mlp.up_proj.weight
    ref.mlp.up_proj = scaled
    x = torch.randn(5, 32)
    with torch.no_grad():
        torch.testing.assert_close(ln.layers.RMSNormMLP.forward(ref.layout(), x), ref(x), **MLP_TOL[torch.float32])


# ---- through the kernels package -----------------------------------------------------------


def test_kernelize_rms_norm_and_layer_norm(ln, kernel_root, test_device):
    kernels = pytest.importorskip("kernels")

    @kernels.use_kernel_forward_from_hub("RMSNorm")
    class HubRMSNorm(LlamaRMSNorm):
        pass

    @kernels.use_kernel_forward_from_hub("LayerNorm")
    class HubLayerNorm(nn.LayerNorm):
        pass

    torch.manual_seed(0)
    model = nn.Sequential(HubRMSNorm(48), nn.Linear(48, 48), HubLayerNorm(48))
    x = torch.randn(4, 48)
    expected = model(x)
    mapping = {
        name: {test_device: kernels.LocalLayerRepository(repo_path=kernel_root, layer_name=name)}
        for name in ("RMSNorm", "LayerNorm")
    }
    with kernels.use_kernel_mapping(mapping, inherit_mapping=False):
        kernels.kernelize(model, mode=kernels.Mode.TRAINING, device=test_device, use_fallback=False)
    assert model[0].forward.__func__ is not LlamaRMSNorm.forward
    assert model[2].forward.__func__ is not nn.LayerNorm.forward
    got = model(x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    got.sum().backward()  # has_backward: training mode works
    assert model[0].weight.grad is not None and model[2].bias.grad is not None
