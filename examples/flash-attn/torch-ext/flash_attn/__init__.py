"""FlashAttention-2 for CPU, CUDA, ROCm, Metal and XPU, with flash-attn 2's Python API.

``flash_attn_func`` and ``flash_attn_varlen_func`` take the arguments of the public
``flash_attn`` package (names, order, defaults and semantics); the options this
kernel does not implement (dropout, sliding windows, softcapping) are refused with
a clear error rather than ignored. Both are differentiable where the build has a
backward (CPU, CUDA, ROCm): a ``torch.autograd.Function`` saves q, k, v, out and the
log-sum-exp, and its backward recomputes P from them (flash-attn 2's backward).

``flash_attention_forward`` is an attention function with transformers' signature
(``AttentionInterface``), and ``layers`` holds a kernel layer for Llama-style
attention modules.

The compiled ops live in ``torch.ops.<namespace>`` (``._ops``): ``fwd``,
``varlen_fwd`` and, where implemented, ``bwd`` and ``varlen_bwd``.
"""

from typing import Optional, Sequence, Tuple, Union

import torch

from ._ops import add_op_namespace_prefix, ops

#: The head sizes the kernels are built for.
HEAD_DIMS = (64, 128)


def _has_op(name: str) -> bool:
    try:
        getattr(ops, name)
    except (AttributeError, RuntimeError):
        return False
    return True


#: Whether this build has a backward (the CPU, CUDA and ROCm variants do; Metal and XPU are
#: forward-only).
HAS_BACKWARD = _has_op("bwd")


def cpu_isa() -> Optional[str]:
    """The instruction set the CPU kernels use in this process ("avx512_bf16", "avx512",
    "portable"), or None for a build without the CPU backend."""
    return str(ops.cpu_isa()) if _has_op("cpu_isa") else None


def _check_options(name: str, dropout_p: float, window_size: Sequence[int], softcap: float) -> None:
    if dropout_p != 0.0:
        raise ValueError(f"{name}: dropout_p={dropout_p} is not supported; this kernel implements dropout_p=0.0 only")
    if tuple(window_size) != (-1, -1):
        raise ValueError(
            f"{name}: window_size={tuple(window_size)} (sliding window attention) is not supported; "
            "only (-1, -1), the full context"
        )
    if softcap not in (None, 0.0):
        raise ValueError(f"{name}: softcap={softcap} is not supported; only 0.0 (no softcapping)")


def _backward_unavailable(device: torch.device) -> NotImplementedError:
    return NotImplementedError(
        f"flash_attn: this build has no backward for {device.type} tensors (the CPU, CUDA and ROCm variants have one); "
        "call it under torch.no_grad() or use torch.nn.functional.scaled_dot_product_attention for training"
    )


def _scale(q: torch.Tensor, softmax_scale: Optional[float]) -> float:
    return float(q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale)


def _needs_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


class _FlashAttnFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, alibi_slopes, softmax_scale, causal):
        out, lse = ops.fwd(q, k, v, alibi_slopes, softmax_scale, causal)
        ctx.save_for_backward(q, k, v, out, lse, alibi_slopes)
        ctx.softmax_scale, ctx.causal = softmax_scale, causal
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, alibi_slopes = ctx.saved_tensors
        if not HAS_BACKWARD:
            raise _backward_unavailable(q.device)
        dq, dk, dv = ops.bwd(dout, q, k, v, out, lse, alibi_slopes, ctx.softmax_scale, ctx.causal)
        return dq, dk, dv, None, None, None


class _FlashAttnVarlenFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, alibi_slopes, softmax_scale, causal):
        out, lse = ops.varlen_fwd(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, alibi_slopes, softmax_scale, causal
        )
        ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes)
        ctx.max_seqlen_q, ctx.max_seqlen_k = max_seqlen_q, max_seqlen_k
        ctx.softmax_scale, ctx.causal = softmax_scale, causal
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes = ctx.saved_tensors
        if not HAS_BACKWARD:
            raise _backward_unavailable(q.device)
        dq, dk, dv = ops.varlen_bwd(
            dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, ctx.max_seqlen_q, ctx.max_seqlen_k,
            alibi_slopes, ctx.softmax_scale, ctx.causal,
        )
        return dq, dk, dv, None, None, None, None, None, None, None


def _results(out, lse, return_lse: bool, return_attn_probs: bool):
    if return_attn_probs:
        # flash-attn 2 returns (out, softmax_lse, S_dmask); S_dmask is a testing aid for
        # dropout, which this kernel does not implement.
        return out, lse, None
    return (out, lse) if return_lse else out


def flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: Optional[torch.Tensor] = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    *,
    return_lse: bool = False,
) -> Union[torch.Tensor, Tuple[torch.Tensor, ...]]:
    """Attention of q over k, v: ``softmax(q k^T * softmax_scale + bias) v`` per head.

    Args:
        q: (batch, seqlen_q, nheads, head_dim); head_dim 64 or 128.
        k, v: (batch, seqlen_k, nheads_k, head_dim). nheads must be a multiple of
            nheads_k (GQA/MQA: q head i reads k/v head i // (nheads // nheads_k)).
            Any strides with a contiguous last dimension are read in place; other
            layouts are copied first.
        dropout_p: must be 0.0 (dropout is not implemented).
        softmax_scale: defaults to head_dim ** -0.5.
        causal: mask aligned to the bottom-right corner of the (seqlen_q, seqlen_k)
            score matrix, as flash-attn 2: query i sees keys j <= i + seqlen_k - seqlen_q.
            A query that sees no key gets a zero output and an lse of +inf.
        window_size, softcap: only the defaults, (-1, -1) and 0.0.
        alibi_slopes: (nheads,) or (batch, nheads), fp32: adds
            ``-slope * |i + seqlen_k - seqlen_q - j|`` to the scaled score of (i, j).
        deterministic: accepted for compatibility; every path here is deterministic.
        return_attn_probs: as flash-attn 2, return (out, softmax_lse, None).
        return_lse: return (out, softmax_lse).

    Returns:
        out (batch, seqlen_q, nheads, head_dim) in q's dtype; with return_lse also
        softmax_lse (batch, nheads, seqlen_q), fp32: log of each row's softmax
        normalizer (of the scaled, biased scores).

    dtypes: fp32, bf16 and fp16 on CPU (bf16 and fp16 are computed in fp32; fp16 via
    fp32 copies); bf16 and fp16 on CUDA/ROCm (fp32 is refused there).
    """
    _check_options("flash_attn_func", dropout_p, window_size, softcap)
    scale = _scale(q, softmax_scale)
    if _needs_grad(q, k, v):
        out, lse = _FlashAttnFunc.apply(q, k, v, alibi_slopes, scale, bool(causal))
    else:
        out, lse = ops.fwd(q, k, v, alibi_slopes, scale, bool(causal))
    return _results(out, lse, return_lse, return_attn_probs)


def flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: Optional[torch.Tensor] = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    *,
    return_lse: bool = False,
) -> Union[torch.Tensor, Tuple[torch.Tensor, ...]]:
    """:func:`flash_attn_func` over packed variable-length sequences.

    Args:
        q: (total_q, nheads, head_dim); k, v: (total_k, nheads_k, head_dim).
        cu_seqlens_q, cu_seqlens_k: (batch + 1,) int32 (int64 is converted): sequence b
            holds rows cu_seqlens[b] to cu_seqlens[b + 1]; sequences may be empty.
        max_seqlen_q, max_seqlen_k: the longest sequence (ints; tensors are read).
        The rest as :func:`flash_attn_func`; causal masks and ALiBi apply per sequence.

    Returns:
        out (total_q, nheads, head_dim); with return_lse also softmax_lse
        (nheads, total_q), fp32 (flash-attn >= 2.4's varlen layout).
    """
    _check_options("flash_attn_varlen_func", dropout_p, window_size, softcap)
    scale = _scale(q, softmax_scale)
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), alibi_slopes, scale, bool(causal))
    if _needs_grad(q, k, v):
        out, lse = _FlashAttnVarlenFunc.apply(*args)
    else:
        out, lse = ops.varlen_fwd(*args)
    return _results(out, lse, return_lse, return_attn_probs)


# -- transformers ---------------------------------------------------------------------


def _sequences(keep: torch.Tensor):
    """Packed-sequence bookkeeping of a (batch, seqlen) keep-mask: the flat indices of
    the kept rows, cu_seqlens (int32) and the longest sequence."""
    lengths = keep.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(keep.flatten(), as_tuple=False).flatten()
    cu_seqlens = torch.nn.functional.pad(torch.cumsum(lengths, dim=0, dtype=torch.int32), (1, 0))
    return indices, cu_seqlens, int(lengths.max()) if lengths.numel() else 0


def _pack(x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Rows `indices` of (batch, seqlen, heads, d) as (rows, heads, d)."""
    return x.reshape(-1, *x.shape[2:]).index_select(0, indices)


def _key_padding(attention_mask: torch.Tensor, q_len: int, kv_len: int, causal: bool) -> torch.Tensor:
    """The (batch, kv_len) keep-mask of keys behind a transformers attention mask.

    A 2-D mask is transformers' padding mask (flash-attention style, 1 = keep). A 4-D
    mask (batch, 1 or heads, q_len, kv_len), boolean (True = keep) or additive (0 =
    keep), is accepted when it is exactly causal-or-full attention over non-padding
    keys, which is what this kernel computes; anything else is refused."""
    if attention_mask.dim() == 2:
        return attention_mask[:, -kv_len:].bool()
    if attention_mask.dim() != 4:
        raise ValueError(f"flash_attention_forward: attention_mask must be 2-D or 4-D, got shape {tuple(attention_mask.shape)}")
    keep = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
    keep = keep[..., -q_len:, -kv_len:]
    keys = keep.any(dim=1).any(dim=1)  # (batch, kv_len)
    expected = keys[:, None, None, :].expand_as(keep)
    if causal:
        i = torch.arange(q_len, device=keep.device)[:, None]
        j = torch.arange(kv_len, device=keep.device)[None, :]
        expected = expected & (j <= i + kv_len - q_len)
    rows = keep.any(dim=-1, keepdim=True)  # queries that see something (others are padding)
    if not torch.equal(keep & rows, expected & rows):
        raise ValueError(
            "flash_attention_forward: this attention mask is neither causal nor full attention over "
            "non-padding keys, which is what this kernel computes; register the kernel with transformers' "
            "flash_attention_2 mask function, or use another attention implementation for this model"
        )
    return keys


def _attention(q, k, v, attention_mask, scaling, dropout, causal):
    """Attention in flash-attn's (batch, seqlen, heads, head_dim) layout with a
    transformers mask (None, 2-D padding mask or a causal/full 4-D mask)."""
    if attention_mask is None:
        return flash_attn_func(q, k, v, dropout_p=dropout, softmax_scale=scaling, causal=causal)
    batch, q_len = q.shape[:2]
    kv_len = k.shape[1]
    keys = _key_padding(attention_mask, q_len, kv_len, causal)
    if bool(keys.all()):
        return flash_attn_func(q, k, v, dropout_p=dropout, softmax_scale=scaling, causal=causal)
    # Queries are the last q_len positions of the (left- or right-)padded sequences.
    q_idx, cu_q, max_q = _sequences(keys[:, -q_len:])
    k_idx, cu_k, max_k = _sequences(keys)
    out = flash_attn_varlen_func(
        _pack(q, q_idx), _pack(k, k_idx), _pack(v, k_idx), cu_q, cu_k, max_q, max_k,
        dropout_p=dropout, softmax_scale=scaling, causal=causal,
    )
    full = out.new_zeros(batch * q_len, *out.shape[1:]).index_copy(0, q_idx, out)
    return full.view(batch, q_len, *out.shape[1:])


def flash_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    scaling: Optional[float] = None,
    dropout: float = 0.0,
    **kwargs,
) -> Tuple[torch.Tensor, None]:
    """A transformers attention function (``AttentionInterface.register``).

    query (batch, heads, q_len, head_dim), key/value (batch, kv_heads, kv_len, head_dim),
    transformers' layout; returns (attn_output (batch, q_len, heads, head_dim), None),
    as transformers' sdpa_attention_forward and flash_attention_forward do. Causal when
    ``kwargs["is_causal"]`` (else ``module.is_causal``, default True) is. The mask may be
    None, transformers' 2-D padding mask (the ``flash_attention_2`` mask function) or a
    4-D mask that is causal/full attention over non-padding keys (the ``sdpa`` one).
    Sliding windows, softcapping and attention sinks are refused.
    """
    for name in ("sliding_window", "softcap", "s_aux"):
        if kwargs.get(name) is not None:
            raise ValueError(f"flash_attention_forward: {name} is not supported by this kernel")
    if kwargs.get("output_attentions", False):
        raise ValueError("flash_attention_forward: output_attentions=True is not supported (no attention weights)")
    causal = kwargs.get("is_causal")
    if causal is None:
        causal = getattr(module, "is_causal", True)
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    out = _attention(q, k, v, attention_mask, scaling, dropout, bool(causal) and q.shape[1] > 0)
    return out, None


# -- torch.compile ---------------------------------------------------------------------
# Shapes of the ops' outputs for fake tensors, so that torch.compile can trace through
# them. Registered once per op namespace (a build imported twice shares one).


def _register_fakes() -> None:
    def lse_like(q, varlen):
        if varlen:
            return q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
        return q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)

    def fwd(q, k, v, alibi_slopes, softmax_scale, causal):
        return torch.empty_like(q, memory_format=torch.contiguous_format), lse_like(q, False)

    def varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, alibi_slopes, softmax_scale, causal):
        return torch.empty_like(q, memory_format=torch.contiguous_format), lse_like(q, True)

    def bwd(dout, q, k, v, *rest):
        return tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))

    fakes = {"fwd": fwd, "varlen_fwd": varlen_fwd, "bwd": bwd, "varlen_bwd": bwd}
    for name, fake in fakes.items():
        if not _has_op(name):
            continue
        try:
            torch.library.register_fake(add_op_namespace_prefix(name), fake)
        except RuntimeError:  # already registered by an earlier import of this build
            pass


_register_fakes()

from . import layers  # noqa: E402  (layers uses the functions above)

__all__ = [
    "HAS_BACKWARD",
    "HEAD_DIMS",
    "cpu_isa",
    "flash_attention_forward",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "layers",
]
