"""SwiGLU activation kernel: ``silu(x[..., :d]) * x[..., d:]`` in one pass.

The op namespace comes from the ``_ops`` module that the build generates next to
this package.
"""

from typing import Optional

import torch

from ._ops import ops


def silu_and_mul(x: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Fused SwiGLU: ``silu(x[..., :d]) * x[..., d:]`` where ``x.shape[-1] == 2 * d``.

    Args:
        x: input of shape ``(..., 2 * d)``; gate half first, then the up half.
            Its last dimension must be contiguous. float32, bfloat16 or float16.
        out: optional output of shape ``(..., d)`` with the dtype and device of
            ``x``; allocated when not given.

    Returns:
        ``out``.
    """
    if out is None:
        shape = x.shape[:-1] + (x.shape[-1] // 2,) if x.dim() > 0 else ()
        out = torch.empty(shape, dtype=x.dtype, device=x.device)
    ops.silu_and_mul(out, x)
    return out


def avx512_enabled() -> bool:
    """Whether the CPU op uses the AVX-512 code path in this process.

    False on builds without the CPU backend (e.g. the CUDA variant), on CPUs
    without AVX-512 (F, BW, VL) and when ``SWIGLU_DISABLE_AVX512=1`` was set
    before the first call.
    """
    if not hasattr(ops, "avx512_enabled"):
        return False
    return bool(ops.avx512_enabled())


from . import layers  # noqa: E402  (layers uses silu_and_mul above)

__all__ = ["silu_and_mul", "avx512_enabled", "layers"]
