"""Kernel layers (the ``kernels`` layer rules: only ``forward``, ``has_backward`` and
``can_torch_compile``; a layer's forward reads the attributes of the module it replaces)."""

import torch
import torch.nn as nn

from . import HAS_BACKWARD, _attention


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaAttention(nn.Module):
    """Drop-in forward for transformers' ``LlamaAttention`` (and the many attention
    modules with its attributes: ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``,
    ``head_dim``, ``scaling``, ``layer_idx``, ``attention_dropout``, ``is_causal``).

    The projections are viewed as (batch, seqlen, heads, head_dim), flash-attn's own
    layout, so q, k and v reach the kernel without transposed copies; rotary
    embeddings are applied as transformers' ``apply_rotary_pos_emb`` does; a cache is
    updated in its (batch, heads, seqlen, head_dim) layout and read back through
    strides. Masks as :func:`flash_attn.flash_attention_forward`. Returns
    ``(attn_output, None)`` like the module it replaces (no attention weights).
    """

    has_backward = HAS_BACKWARD
    can_torch_compile = True

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, cache=None, **kwargs):
        # transformers 5.25 names the KV cache `cache`; earlier releases pass `past_key_values`.
        if cache is None:
            cache = kwargs.pop("past_key_values", None)
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        q = self.q_proj(hidden_states).view(hidden_shape)
        k = self.k_proj(hidden_states).view(hidden_shape)
        v = self.v_proj(hidden_states).view(hidden_shape)
        if position_embeddings is not None:
            cos, sin = (t.unsqueeze(2) for t in position_embeddings)  # (batch, seqlen, 1, head_dim)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
        if cache is not None:
            k, v = cache.update(k.transpose(1, 2), v.transpose(1, 2), self.layer_idx)
            k, v = k.transpose(1, 2), v.transpose(1, 2)
        causal = kwargs.get("is_causal")
        if causal is None:
            causal = getattr(self, "is_causal", True)
        dropout = getattr(self, "attention_dropout", 0.0) if self.training else 0.0
        out = _attention(q, k, v, attention_mask, self.scaling, dropout, bool(causal))
        return self.o_proj(out.reshape(*input_shape, -1)), None


__all__ = ["LlamaAttention"]
