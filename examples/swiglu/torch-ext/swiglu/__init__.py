"""Gated activations in one pass: ``act(x[..., :d]) * x[..., d:]``.

``silu_and_mul`` (SwiGLU), ``gelu_and_mul`` (GeGLU, exact or tanh GELU) and
their gradients. The functions are differentiable: when autograd records, they
go through a ``torch.autograd.Function`` whose backward calls the kernel's
``*_backward`` op.

The op namespace comes from the ``_ops`` module that the build generates next to
this package.
"""

from typing import Optional

import torch

from ._ops import ops

# activation -> (forward op name, backward op name)
_OPS = {
    "silu": ("silu_and_mul", "silu_and_mul_backward"),
    "gelu": ("gelu_and_mul", "gelu_and_mul_backward"),
    "gelu_tanh": ("gelu_tanh_and_mul", "gelu_tanh_and_mul_backward"),
}


class _ActAndMul(torch.autograd.Function):
    """``act(x[..., :d]) * x[..., d:]`` with the kernel's backward op.

    Only the input is saved; the backward recomputes the activation from it
    (one pass over memory, like the forward). Double backward is not supported.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, activation: str) -> torch.Tensor:
        ctx.activation = activation
        ctx.save_for_backward(x)
        return _forward(activation, x, None)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor):
        (x,) = ctx.saved_tensors
        grad_input = _empty(x.shape, x)
        getattr(ops, _OPS[ctx.activation][1])(grad_input, grad_out, x)
        return grad_input, None


def _empty(shape, like: torch.Tensor) -> torch.Tensor:
    """A contiguous result tensor. The CPU build allocates large ones on
    transparent huge pages, which page-fault in a fraction of the time
    (swiglu_cpu/huge_pages.cpp); elsewhere this is torch.empty."""
    if like.device.type == "cpu" and hasattr(ops, "new_output"):
        return ops.new_output(list(shape), like.dtype)
    return torch.empty(shape, dtype=like.dtype, device=like.device)


def _forward(activation: str, x: torch.Tensor, out: Optional[torch.Tensor]) -> torch.Tensor:
    if out is None:
        out = _empty(x.shape[:-1] + (x.shape[-1] // 2,) if x.dim() > 0 else (), x)
    getattr(ops, _OPS[activation][0])(out, x)
    return out


def _act_and_mul(activation: str, x: torch.Tensor, out: Optional[torch.Tensor]) -> torch.Tensor:
    if torch.is_grad_enabled() and x.requires_grad:
        if out is not None:
            raise RuntimeError(
                f"{_OPS[activation][0]}: out= does not support automatic differentiation "
                "(x requires grad); call it without out= or under torch.no_grad()"
            )
        return _ActAndMul.apply(x, activation)
    return _forward(activation, x, out)


def silu_and_mul(x: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Fused SwiGLU: ``silu(x[..., :d]) * x[..., d:]`` where ``x.shape[-1] == 2 * d``.

    Args:
        x: input of shape ``(..., 2 * d)``; gate half first, then the up half.
            float32, bfloat16 or float16, any layout (rows that share one
            stride and a contiguous last dimension are read in place, anything
            else is copied first).
        out: optional output of shape ``(..., d)`` with the dtype and device of
            ``x``; allocated when not given. Not allowed while autograd
            records a graph for ``x``.

    Returns:
        ``out``. Differentiable with respect to ``x``.
    """
    return _act_and_mul("silu", x, out)


def gelu_and_mul(
    x: torch.Tensor, approximate: str = "none", out: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Fused GeGLU: ``F.gelu(x[..., :d], approximate=approximate) * x[..., d:]``.

    ``approximate`` is ``"none"`` (the exact, erf-based GELU) or ``"tanh"``, as
    in ``torch.nn.functional.gelu``. Otherwise as :func:`silu_and_mul`.
    """
    if approximate == "none":
        return _act_and_mul("gelu", x, out)
    if approximate == "tanh":
        return _act_and_mul("gelu_tanh", x, out)
    raise ValueError(f"gelu_and_mul: approximate must be 'none' or 'tanh', got {approximate!r}")


def gelu_tanh_and_mul(x: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``gelu_and_mul(x, approximate="tanh", out=out)``."""
    return _act_and_mul("gelu_tanh", x, out)


def avx512_enabled() -> bool:
    """Whether the CPU ops use the AVX-512 code path in this process.

    False on builds without the CPU backend (e.g. the CUDA variant), on CPUs
    without AVX-512 (F, BW, VL) and when ``SWIGLU_DISABLE_AVX512=1`` was set
    before the first call.
    """
    if not hasattr(ops, "avx512_enabled"):
        return False
    return bool(ops.avx512_enabled())


from . import layers  # noqa: E402  (layers uses the functions above)

__all__ = ["silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul", "avx512_enabled", "layers"]
