"""Drop-in layers for the ``kernels`` package (``kernelize`` / layer mappings).

As ``kernels`` requires, the layers define no ``__init__`` and no members other
than ``forward`` and the ``has_backward`` / ``can_torch_compile`` flags: they
only replace the ``forward`` of an existing module and read its attributes.
The ops have a backward (see ``swiglu._ActAndMul``), hence ``has_backward =
True``; no fake (meta) kernels are registered, hence ``can_torch_compile =
False``.
"""

from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from . import gelu_and_mul, gelu_tanh_and_mul, silu_and_mul

__all__ = ["SiluAndMul", "GeluAndMul", "GeluTanhAndMul", "LlamaMLP"]


class SiluAndMul(nn.Module):
    """``silu(x[..., :d]) * x[..., d:]`` for ``x`` of shape ``(..., 2 * d)``."""

    has_backward = True
    can_torch_compile = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return silu_and_mul(x)


class GeluAndMul(nn.Module):
    """``gelu(x[..., :d]) * x[..., d:]``, exact GELU unless the replaced module
    has ``approximate = "tanh"`` (as vLLM's ``GeluAndMul`` does)."""

    has_backward = True
    can_torch_compile = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gelu_and_mul(x, approximate=getattr(self, "approximate", "none"))


class GeluTanhAndMul(nn.Module):
    """``gelu(x[..., :d], approximate="tanh") * x[..., d:]``."""

    has_backward = True
    can_torch_compile = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gelu_tanh_and_mul(x)


class LlamaMLP(nn.Module):
    """Replacement ``forward`` for transformers' ``LlamaMLP`` (and look-alikes:
    Mistral, Qwen2, Gemma, ... MLPs with the same attributes).

    Computes ``down_proj(act_fn(gate_proj(x)) * up_proj(x))`` from the module's
    ``gate_proj``, ``up_proj``, ``down_proj`` and ``act_fn``. The activation
    and product use the fused op chosen from ``act_fn``: SiLU, or GELU (exact
    or tanh) for the GELU modules of torch and transformers; any other
    ``act_fn`` runs as the module itself would. When both projections are
    plain ``nn.Linear`` and no gradient is being recorded, they write straight
    into the two halves of the op's input, so no concatenation copy is made.
    """

    has_backward = True
    can_torch_compile = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fused = _fused_activation(self.act_fn)
        if fused is None:
            return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        gate_up = _gate_up(self.gate_proj, self.up_proj, x)
        return self.down_proj(fused(gate_up))


# transformers.activations classes by name (transformers need not be
# installed): the exact GELU, and the tanh approximation in its several
# spellings (NewGELU, FastGELU and AccurateGELU compute the same function).
_TRANSFORMERS_SILU = {"SiLUActivation"}
_TRANSFORMERS_GELU = {"GELUActivation"}
_TRANSFORMERS_GELU_TANH = {
    "GELUTanh",
    "PytorchGELUTanh",
    "NewGELUActivation",
    "FastGELUActivation",
    "AccurateGELUActivation",
}


def _fused_activation(act_fn) -> Optional[Callable[[torch.Tensor], torch.Tensor]]:
    """The fused ``act(x[..., :d]) * x[..., d:]`` that matches ``act_fn``, or None.

    Exact types only: a subclass may change what forward computes.
    """
    kind = type(act_fn)
    if kind is nn.SiLU or act_fn is F.silu:
        return silu_and_mul
    if kind is nn.GELU:
        if act_fn.approximate == "tanh":
            return gelu_tanh_and_mul
        return gelu_and_mul if act_fn.approximate == "none" else None
    if act_fn is F.gelu:
        return gelu_and_mul
    if kind.__module__ == "transformers.activations":
        if kind.__name__ in _TRANSFORMERS_SILU:
            return silu_and_mul
        if kind.__name__ in _TRANSFORMERS_GELU:
            return gelu_and_mul
        if kind.__name__ in _TRANSFORMERS_GELU_TANH:
            return gelu_tanh_and_mul
    return None


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
