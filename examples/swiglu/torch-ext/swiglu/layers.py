"""Drop-in layers for the ``kernels`` package (``kernelize`` / layer mappings).

As ``kernels`` requires, the layers define no ``__init__`` and no members other
than ``forward`` and the ``has_backward`` / ``can_torch_compile`` flags: they
only replace the ``forward`` of an existing module and read its attributes.
The fused op has no autograd formula, hence ``has_backward = False``.
"""

import torch
from torch import nn

from . import silu_and_mul

__all__ = ["SiluAndMul", "LlamaMLP"]


class SiluAndMul(nn.Module):
    """``silu(x[..., :d]) * x[..., d:]`` for ``x`` of shape ``(..., 2 * d)``."""

    has_backward = False
    can_torch_compile = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return silu_and_mul(x)


class LlamaMLP(nn.Module):
    """Replacement ``forward`` for transformers' ``LlamaMLP`` (and look-alikes).

    Computes ``down_proj(silu(gate_proj(x)) * up_proj(x))`` from the module's
    ``gate_proj``, ``up_proj`` and ``down_proj``. The activation uses the fused
    op; when both projections are plain ``nn.Linear`` and no gradient is being
    recorded, they write straight into the two halves of the op's input, so
    no concatenation copy is made.
    """

    has_backward = False
    can_torch_compile = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = _gate_up(self.gate_proj, self.up_proj, x)
        return self.down_proj(silu_and_mul(gate_up))


def _gate_up(gate_proj: nn.Module, up_proj: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``cat([gate_proj(x), up_proj(x)], -1)``, without the copy when possible."""
    if _can_write_in_place(gate_proj, up_proj, x):
        d = gate_proj.weight.shape[0]
        x2d = x.reshape(-1, x.shape[-1])
        gate_up = x2d.new_empty((x2d.shape[0], 2 * d))
        _linear_into(gate_up[:, :d], x2d, gate_proj)
        _linear_into(gate_up[:, d:], x2d, up_proj)
        return gate_up.view(*x.shape[:-1], 2 * d)
    return torch.cat([gate_proj(x), up_proj(x)], dim=-1)


def _can_write_in_place(gate_proj: nn.Module, up_proj: nn.Module, x: torch.Tensor) -> bool:
    # Exact type check: subclasses (quantized or LoRA linears, ...) may change
    # what forward computes.
    if type(gate_proj) is not nn.Linear or type(up_proj) is not nn.Linear:
        return False
    if gate_proj.weight.shape != up_proj.weight.shape or x.dim() == 0:
        return False
    tensors = [x, gate_proj.weight, up_proj.weight]
    tensors += [b for b in (gate_proj.bias, up_proj.bias) if b is not None]
    if any(t.dtype != x.dtype or t.device != x.device for t in tensors):
        return False
    # out= variants do not support autograd.
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


def _linear_into(out: torch.Tensor, x2d: torch.Tensor, linear: nn.Linear) -> None:
    # out is a column block of a row-major buffer, a layout BLAS writes to
    # directly.
    if linear.bias is None:
        torch.mm(x2d, linear.weight.t(), out=out)
    else:
        torch.addmm(linear.bias, x2d, linear.weight.t(), out=out)
