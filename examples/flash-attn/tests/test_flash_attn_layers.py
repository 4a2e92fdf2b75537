"""The kernel inside transformers (a tiny random Llama built from a config, no download),
three ways: transformers' own hub-kernel attention path (attn_implementation =
"<org>/flash-attn", served from this folder through LOCAL_KERNELS), the
flash_attention_forward function registered with AttentionInterface, and the
LlamaAttention kernel layer swapped in by kernels.kernelize. Each is compared with the
same model under transformers' sdpa attention, with a left-padded batch."""

import inspect
import pathlib

import pytest
import torch

transformers = pytest.importorskip("transformers")
kernels = pytest.importorskip("kernels")

from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaAttention  # noqa: E402

LOGITS_TOL = dict(atol=1e-4, rtol=1e-4)  # fp32 throughout


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=256,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 128, (3, 37), generator=g)
    mask = torch.ones(3, 37, dtype=torch.long)
    mask[1, :9] = 0  # left padding
    mask[2, :36] = 0  # a single real token
    return ids, mask


def logits(model, attn_implementation, ids, mask):
    model.set_attn_implementation(attn_implementation)
    try:
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask).logits
    finally:
        model.set_attn_implementation("sdpa")


def assert_same_logits(got, want, mask):
    keep = mask.bool()  # padded positions are not compared (sdpa leaves them arbitrary)
    torch.testing.assert_close(got[keep], want[keep], **LOGITS_TOL)


def test_layers_follow_the_kernels_rules(flash_attn):
    import torch.nn as nn

    for name in flash_attn.layers.__all__:
        layer = getattr(flash_attn.layers, name)
        assert issubclass(layer, nn.Module)
        members = {k for k in vars(layer) if not k.startswith("__")}
        assert members <= {"forward", "has_backward", "can_torch_compile"}, members
        assert "__init__" not in vars(layer)
    assert flash_attn.layers.LlamaAttention.has_backward is flash_attn.HAS_BACKWARD is True


def test_transformers_hub_kernel_path(flash_attn, kernel_root, model, batch, monkeypatch):
    """transformers loads the kernel as it loads kernels-community/flash-attn2 and calls
    its flash_attn_varlen_func / flash_attn_func through its own flash-attention code."""
    monkeypatch.setenv("LOCAL_KERNELS", f"kbuild/flash-attn={pathlib.Path(kernel_root).resolve()}")
    ids, mask = batch
    want = logits(model, "sdpa", ids, mask)
    assert_same_logits(logits(model, "kbuild/flash-attn", ids, mask), want, mask)
    full = torch.ones_like(mask)  # no padding: flash_attn_func, causal
    assert_same_logits(logits(model, "kbuild/flash-attn", ids, full), logits(model, "sdpa", ids, full), full)


@pytest.mark.parametrize("mask_function", ["flash_attention_2", "sdpa"])
def test_flash_attention_forward_as_an_attention_function(flash_attn, model, batch, mask_function):
    """Registered with AttentionInterface; with transformers' 2-D padding masks
    (flash_attention_2's mask function) and its 4-D boolean masks (sdpa's)."""
    params = inspect.signature(flash_attn.flash_attention_forward).parameters
    assert list(params)[:5] == ["module", "query", "key", "value", "attention_mask"]
    # transformers 5.22 treats any implementation name containing "flash" as a flash-attn
    # package or hub kernel and tries to import one, so the registered name avoids it.
    name = "kbuild_fa2_" + {"flash_attention_2": "padding_mask", "sdpa": "4d_mask"}[mask_function]
    AttentionInterface.register(name, flash_attn.flash_attention_forward)
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[mask_function])
    ids, mask = batch
    assert_same_logits(logits(model, name, ids, mask), logits(model, "sdpa", ids, mask), mask)


def test_flash_attention_forward_refuses_masks_it_cannot_compute(flash_attn):
    q = torch.randn(1, 4, 6, 64)
    k = v = torch.randn(1, 2, 6, 64)
    mask = torch.ones(1, 1, 6, 6, dtype=torch.bool).tril()
    mask[0, 0, 5, 2] = False  # a hole that is not padding
    module = torch.nn.Module()
    with pytest.raises(ValueError, match="neither causal nor full attention over non-padding keys"):
        flash_attn.flash_attention_forward(module, q, k, v, mask)
    with pytest.raises(ValueError, match="sliding_window is not supported"):
        flash_attn.flash_attention_forward(module, q, k, v, None, sliding_window=4)


@pytest.fixture()
def kernelized(flash_attn, kernel_root, model, test_device):
    """The model's attention modules as a hub-kernel class, kernelized with the layer."""

    @kernels.use_kernel_forward_from_hub("LlamaAttention")
    class HubLlamaAttention(LlamaAttention):
        pass

    originals = {}
    for module in model.modules():
        if type(module) is LlamaAttention:
            originals[module] = module.forward
            module.__class__ = HubLlamaAttention
    mapping = {"LlamaAttention": {test_device: kernels.LocalLayerRepository(pathlib.Path(kernel_root), layer_name="LlamaAttention")}}
    with kernels.use_kernel_mapping(mapping, inherit_mapping=False):
        # TRAINING: kernels only takes layers with has_backward (the CPU build has one).
        kernels.kernelize(model, mode=kernels.Mode.TRAINING, device=test_device)
    # kernels binds the layer's forward on each instance; popping it restores the original.
    replaced = [m for m in originals if "forward" in vars(m) and m.forward.__func__ is not LlamaAttention.forward]
    assert len(replaced) == len(originals) == 2
    try:
        yield model
    finally:
        for module in originals:
            module.__class__ = LlamaAttention
            vars(module).pop("forward", None)


def test_kernelized_llama_attention_layer(model, batch, kernelized):
    ids, mask = batch
    want = logits(model, "sdpa", ids, mask)  # the layer reads sdpa's 4-D masks
    with torch.no_grad():
        got = kernelized(input_ids=ids, attention_mask=mask).logits
    assert_same_logits(got, want, mask)


def test_kernelized_layer_generates_with_a_cache(model, batch, kernelized):
    """Greedy decoding through the KV cache, each step against one uncached forward pass of the
    reference over the same tokens (teacher forcing): a random model's two best logits can lie
    closer than float noise, and a second generate that flips one argmax is incomparable after it."""
    ids, mask = batch
    with torch.no_grad():
        got = kernelized.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, do_sample=False,
                                  output_logits=True, return_dict_in_generate=True)
    for module in kernelized.modules():
        if isinstance(module, LlamaAttention):
            vars(module).pop("forward", None)  # back to transformers' forward
    new_tokens = got.sequences.shape[1] - ids.shape[1]
    full_mask = torch.cat([mask, mask.new_ones(mask.shape[0], new_tokens)], dim=1)
    positions = (full_mask.cumsum(-1) - 1).clamp(min=0)  # as generate numbers left-padded rows
    with torch.no_grad():
        want = model(input_ids=got.sequences, attention_mask=full_mask, position_ids=positions).logits
    assert len(got.logits) == new_tokens
    for step, step_logits in enumerate(got.logits):
        reference = want[:, ids.shape[1] - 1 + step]
        torch.testing.assert_close(step_logits, reference, **LOGITS_TOL)
        # The kernel's greedy pick is the reference's too, unless its two best are a tie.
        best, runner_up = reference.topk(2, dim=-1).values.unbind(-1)
        clear = (best - runner_up) > 10 * LOGITS_TOL["atol"]
        assert torch.equal(step_logits.argmax(-1)[clear], reference.argmax(-1)[clear])


def test_kernelized_layer_trains(model, batch, kernelized):
    ids, mask = batch
    full = torch.ones_like(mask)

    def grads(m):
        m.zero_grad()
        m(input_ids=ids, attention_mask=full, labels=ids).loss.backward()
        return {n: p.grad.clone() for n, p in m.named_parameters() if "self_attn" in n}

    got = grads(kernelized)
    for module in kernelized.modules():
        if isinstance(module, LlamaAttention):
            vars(module).pop("forward", None)
    want = grads(model)
    model.zero_grad()
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-5, rtol=1e-4)
