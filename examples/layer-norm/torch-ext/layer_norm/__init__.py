"""Fused LayerNorm / RMSNorm (forward and backward, optional fused residual add)
and a fused SwiGLU activation, for the Hugging Face Kernel Hub.

Functional API (gradients flow through every function: each is a
``torch.autograd.Function`` over the compiled forward and backward ops):

- ``layer_norm(x, weight=None, bias=None, eps=1e-5, residual=None)``
- ``rms_norm(x, weight=None, eps=1e-6, residual=None)``
- ``silu_and_mul(x, out=None)``

The norms normalize over the last dimension. With ``residual`` they compute the
prenorm pattern in one pass, ``s = x + residual`` (rounded to the input dtype),
``y = norm(s)``, and return ``(y, s)``; without it they return ``y``.

The op namespace comes from the ``_ops`` module the build generates next to this
package; the raw ops (``ops.layer_norm_fwd`` and friends) write into
preallocated outputs, see ``torch-ext/torch_binding.h``.
"""

from typing import Optional, Sequence, Tuple, Union

import torch

from ._ops import ops

__all__ = [
    "layer_norm",
    "rms_norm",
    "silu_and_mul",
    "avx512_enabled",
    "avx512_bf16_enabled",
    "layers",
    "ops",
]

Tensor = torch.Tensor
NormResult = Union[Tensor, Tuple[Tensor, Tensor]]


def _new(shape, like: Tensor) -> Tensor:
    """An op's contiguous result. The CPU build allocates large ones on transparent
    huge pages and reuses freed ones (layer_norm_cpu/huge_pages.cpp): a fresh
    mapping page-faults every page first, which costs more than the op itself."""
    if like.device.type == "cpu" and hasattr(ops, "new_output"):
        return ops.new_output(list(shape), like.dtype)
    return torch.empty(shape, dtype=like.dtype, device=like.device)


def _stats_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _norm_forward(x2, residual2, weight, bias, eps, rms):
    """Run the forward op on 2-D rows; returns (y, s, mean, rstd) where s is the
    tensor that was normalized (x2, or the new residual)."""
    rows = x2.shape[0]
    y = _new(x2.shape, x2)
    res_out = None if residual2 is None else _new(y.shape, y)
    stats = dict(dtype=_stats_dtype(x2.dtype), device=x2.device)
    rstd = torch.empty(rows, **stats)
    if rms:
        mean = None
        ops.rms_norm_fwd(y, res_out, rstd, x2, residual2, weight, float(eps))
    else:
        mean = torch.empty(rows, **stats)
        ops.layer_norm_fwd(y, res_out, mean, rstd, x2, residual2, weight, bias, float(eps))
    return y, (x2 if res_out is None else res_out), res_out, mean, rstd


class _NormFunction(torch.autograd.Function):
    """Autograd over the forward and backward ops, on 2-D rows."""

    @staticmethod
    def forward(ctx, x2, residual2, weight, bias, eps, rms):
        y, s, res_out, mean, rstd = _norm_forward(x2, residual2, weight, bias, eps, rms)
        ctx.rms = rms
        ctx.has_residual = residual2 is not None
        ctx.save_for_backward(s, mean, rstd, weight)
        return y, res_out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y, grad_res_out):
        s, mean, rstd, weight = ctx.saved_tensors
        need_x, need_res, need_w, need_b = ctx.needs_input_grad[:4]
        grad_s = _new(s.shape, s)
        grad_w = torch.empty_like(weight) if need_w else None
        grad_b = s.new_empty(s.shape[-1]) if need_b and not ctx.rms else None
        if grad_y is None:
            grad_y = torch.zeros_like(s)
        if ctx.rms:
            ops.rms_norm_bwd(grad_s, grad_w, grad_y, grad_res_out, s, rstd, weight)
        else:
            ops.layer_norm_bwd(grad_s, grad_w, grad_b, grad_y, grad_res_out, s, mean, rstd, weight)
        # d s / d x = d s / d residual = identity.
        return (
            grad_s if need_x else None,
            grad_s if ctx.has_residual and need_res else None,
            grad_w,
            grad_b,
            None,
            None,
        )


def _needs_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _norm(x: Tensor, residual, weight, bias, eps, rms, n_dims: int = 1) -> NormResult:
    """Shared front end: flatten to rows of the trailing `n_dims` dimensions."""
    if x.dim() < n_dims:
        raise ValueError(f"expected an input with at least {n_dims} dimension(s), got shape {tuple(x.shape)}")
    shape = x.shape
    n = 1
    for size in shape[len(shape) - n_dims :]:
        n *= size
    if residual is not None and residual.shape != shape:
        raise ValueError(f"residual must have the input's shape {tuple(shape)}, got {tuple(residual.shape)}")
    if weight is not None:
        weight = weight.reshape(n)
    if bias is not None:
        bias = bias.reshape(n)
    if n == 0:
        return _empty_norm(x, residual, weight, bias)
    x2 = x.reshape(-1, n)
    residual2 = None if residual is None else residual.reshape(-1, n)
    if _needs_grad(x, residual, weight, bias):
        y, res_out = _NormFunction.apply(x2, residual2, weight, bias, eps, rms)
    else:
        y, _, res_out, _, _ = _norm_forward(x2, residual2, weight, bias, eps, rms)
    y = y.view(shape)
    return y if residual is None else (y, res_out.view(shape))


def _empty_norm(x, residual, weight, bias) -> NormResult:
    """Empty rows (the ops refuse them): empty outputs that keep the autograd
    graph connected."""
    y = x * 0
    if weight is not None:
        y = y + weight.sum() * 0
    if bias is not None:
        y = y + bias.sum() * 0
    if residual is None:
        return y
    s = x + residual
    return y + s * 0, s


def layer_norm(
    x: Tensor,
    weight: Optional[Tensor] = None,
    bias: Optional[Tensor] = None,
    eps: float = 1e-5,
    residual: Optional[Tensor] = None,
    normalized_shape: Optional[Sequence[int]] = None,
) -> NormResult:
    """``F.layer_norm`` over the last dimension (or the trailing
    ``normalized_shape`` dimensions), one pass over memory.

    Args:
        x: float32, bfloat16 or float16 (float64 on CPU). Any layout.
        weight, bias: optional, ``n`` elements in ``x``'s dtype (``n`` = the
            size of the normalized dimensions).
        eps: added to the variance.
        residual: optional tensor of ``x``'s shape and dtype: the prenorm
            pattern. Then ``s = x + residual`` (rounded to the dtype) is
            normalized and ``(y, s)`` is returned.
        normalized_shape: normalize over these trailing dimensions (as
            ``torch.nn.LayerNorm``); default: the last dimension.
    """
    n_dims = 1 if normalized_shape is None else len(tuple(normalized_shape))
    if normalized_shape is not None and tuple(x.shape[x.dim() - n_dims :]) != tuple(normalized_shape):
        raise ValueError(
            f"normalized_shape {tuple(normalized_shape)} does not match the trailing dimensions of "
            f"the input's shape {tuple(x.shape)}"
        )
    return _norm(x, residual, weight, bias, eps, rms=False, n_dims=n_dims)


def rms_norm(
    x: Tensor,
    weight: Optional[Tensor] = None,
    eps: float = 1e-6,
    residual: Optional[Tensor] = None,
) -> NormResult:
    """LlamaRMSNorm over the last dimension, one pass over memory:
    ``weight * (s * rsqrt(mean(s^2) + eps)).to(dtype)``, computed in fp32 (the
    normalized value is rounded to the input dtype before the weight multiply,
    as transformers does). ``residual`` as in :func:`layer_norm`."""
    return _norm(x, residual, weight, None, eps, rms=True)


class _SiluAndMulFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = _new(x.shape[:-1] + (x.shape[-1] // 2,), x)
        ops.silu_and_mul(out, x)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        # d/dg silu(g) * u = u * sigmoid(g) * (1 + g * (1 - sigmoid(g))),
        # d/du = silu(g); in fp32 for 16-bit inputs (a composite, not a kernel).
        (x,) = ctx.saved_tensors
        d = x.shape[-1] // 2
        g = x[..., :d].float()
        u = x[..., d:].float()
        dy = grad_out.float()
        sig = torch.sigmoid(g)
        grad_g = dy * u * sig * (1 + g * (1 - sig))
        grad_u = dy * g * sig
        return torch.cat([grad_g, grad_u], dim=-1).to(x.dtype)


def silu_and_mul(x: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Fused SwiGLU activation: ``silu(x[..., :d]) * x[..., d:]`` for ``x`` of
    shape ``(..., 2 * d)``, one pass. ``out`` (shape ``(..., d)``) is written
    when given (no autograd then)."""
    if x.dim() == 0:
        raise ValueError("silu_and_mul: input must have at least one dimension, got a 0-dim tensor")
    if out is not None:
        ops.silu_and_mul(out, x)
        return out
    if _needs_grad(x):
        return _SiluAndMulFunction.apply(x)
    out = _new(x.shape[:-1] + (x.shape[-1] // 2,), x)
    ops.silu_and_mul(out, x)
    return out


def avx512_enabled() -> bool:
    """Whether the CPU forward ops use the AVX-512 path in this process (False
    on builds without the CPU backend, on CPUs without AVX-512 F/BW/VL, and when
    ``LAYER_NORM_DISABLE_AVX512=1`` was set before the first call)."""
    if not hasattr(ops, "avx512_enabled"):
        return False
    return bool(ops.avx512_enabled())


def avx512_bf16_enabled() -> bool:
    """Whether, in addition, bf16 values are rounded with the AVX512_BF16
    instruction (CPUs that have it, unless ``LAYER_NORM_DISABLE_AVX512_BF16=1``).
    It flushes bf16 results below 2**-126 to zero, where the portable rounding
    keeps subnormals."""
    if not hasattr(ops, "avx512_bf16_enabled"):
        return False
    return bool(ops.avx512_bf16_enabled())


from . import layers  # noqa: E402  (layers uses the functions above)
