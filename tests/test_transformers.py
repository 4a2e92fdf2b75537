"""transformers end to end with the examples' built CPU kernels (transformers 5.22.2 with
kernels 0.17.2, the pair that agrees; see MACHINE.md).

A tiny random Llama is built from a config here and saved locally, so nothing is
downloaded. Then:
- `kernels.kernelize` replaces its RMSNorm and MLP forwards by examples/layer-norm's
  `RMSNorm` and examples/swiglu's `LlamaMLP`, through `LocalLayerRepository` mappings on
  device `cpu`; the logits match the plain model;
- `from_pretrained` with a KernelConfig tuple key fuses post_attention_layernorm + mlp into
  examples/layer-norm's `RMSNormMLP`, using the `RMSNormMLPLayout` kbuild stamps from its
  kbuild.toml; the plain checkpoint loads with no missing keys and the logits match.

Each scenario runs in a fresh interpreter: kernelize and KernelConfig register mappings
process-wide."""

from __future__ import annotations


import pytest

from tiny_llama import FUSE_RMSNORM_MLP, TINY_LLAMA, run

pytest.importorskip("transformers", reason="transformers is in the test extras; not installed here")

# fp32 end to end; the kernels use a different (vectorized, blocked) summation order than
# eager, so logits agree to rounding, not bit for bit.
TOLERANCE = 1e-4

KERNELIZE = TINY_LLAMA + r"""
from kernels import LocalLayerRepository, Mode, kernelize, use_kernel_mapping
from pathlib import Path
from transformers.integrations import replace_kernel_forward_from_hub
from transformers.models.llama import modeling_llama

# transformers marks LlamaRMSNorm extensible ("RMSNorm") but not LlamaMLP: make it so here.
replace_kernel_forward_from_hub(modeling_llama.LlamaMLP, "MLP")
model = LlamaForCausalLM.from_pretrained(checkpoint).eval()
mapping = {
    "RMSNorm": {"cpu": LocalLayerRepository(repo_path=Path(sys.argv[1]), layer_name="RMSNorm")},
    "MLP": {"cpu": LocalLayerRepository(repo_path=Path(sys.argv[2]), layer_name="LlamaMLP")},
}
with use_kernel_mapping(mapping):
    # Fallback keeps layers without a mapping (rotary_pos_emb) eager; the test checks
    # that RMSNorm and MLP were really replaced.
    model = kernelize(model, device="cpu", mode=Mode.INFERENCE)
layer = model.model.layers[0]
with torch.no_grad():
    got = model(ids).logits
print(json.dumps({
    "norm_forward": layer.input_layernorm.forward.__qualname__,
    "norm_module": layer.input_layernorm.forward.__module__,
    "mlp_forward": layer.mlp.forward.__qualname__,
    "mlp_module": layer.mlp.forward.__module__,
    "final_norm": model.model.norm.forward.__qualname__,
    "max_diff": (got - expected).abs().max().item(),
}))
"""

FUSE = FUSE_RMSNORM_MLP + r"""
print(json.dumps({
    "layout": type(layer.post_attention_layernorm).__name__,
    "forward": layer.post_attention_layernorm.forward.__qualname__,
    "forward_module": layer.post_attention_layernorm.forward.__module__,
    "mlp": type(layer.mlp).__name__,
    "missing": sorted(info["missing_keys"]),
    "unexpected": sorted(info["unexpected_keys"]),
    "max_diff": (got - expected).abs().max().item(),
}))
"""


@pytest.fixture(scope="module")
def built(built_example) -> dict:
    """The examples built in place (shared with the other example tests)."""
    return {name: built_example(name).root for name in ("layer-norm", "swiglu")}


def test_kernelize_replaces_rmsnorm_and_mlp_forwards_with_the_built_kernels(built):
    report = run(KERNELIZE, str(built["layer-norm"]), str(built["swiglu"]))
    # The forwards really are the kernels' layers, loaded from the built variants.
    assert report["norm_forward"] == "RMSNorm.forward" and "layer_norm" in report["norm_module"]
    assert report["final_norm"] == "RMSNorm.forward"
    assert report["mlp_forward"] == "LlamaMLP.forward" and "swiglu" in report["mlp_module"]
    assert report["max_diff"] <= TOLERANCE, report


def test_from_pretrained_fuses_rmsnorm_and_mlp_into_the_built_rmsnormmlp(built):
    report = run(FUSE, kernel=built["layer-norm"])
    assert report["layout"] == "RMSNormMLPLayout", "the Layout kbuild stamped from kbuild.toml"
    assert report["forward"] == "RMSNormMLP.forward" and "layer_norm" in report["forward_module"]
    assert report["mlp"] == "Identity"
    assert report["missing"] == [] and report["unexpected"] == [], "the plain checkpoint loads into the fused model"
    assert report["max_diff"] <= TOLERANCE, report
