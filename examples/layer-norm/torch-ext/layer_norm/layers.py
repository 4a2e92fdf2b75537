"""Drop-in layers for the ``kernels`` package (``kernelize``, layer mappings and
transformers' ``KernelConfig``).

As ``kernels`` requires, the layers define no ``__init__`` and no members other
than ``forward`` and the ``has_backward`` / ``can_torch_compile`` flags: they
replace the ``forward`` of an existing module and read its attributes.
Gradients flow through the kernels' backward ops, hence ``has_backward = True``.
No fake (meta) kernels are registered, hence ``can_torch_compile = False``.

- ``RMSNorm``: transformers' ``LlamaRMSNorm`` (reads ``weight``,
  ``variance_epsilon``).
- ``LayerNorm``: ``torch.nn.LayerNorm`` (reads ``normalized_shape``,
  ``weight``, ``bias``, ``eps``).
- ``RMSNormMLP``: Llama's post-attention RMSNorm followed by its SwiGLU MLP, as
  one kernel layer for transformers' fusion (reads ``weight``,
  ``variance_epsilon``, ``gate_proj``, ``up_proj``, ``down_proj``). Its
  companion ``RMSNormMLPLayout`` is generated into the build by kbuild from
  ``kbuild.toml``.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from . import layer_norm, rms_norm, silu_and_mul

__all__ = ["RMSNorm", "LayerNorm", "RMSNormMLP"]

# What every backend's ops compute in (fp64 is CPU only).
_KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _kernel_dtype(x: torch.Tensor) -> bool:
    return x.dtype in _KERNEL_DTYPES or (x.dtype == torch.float64 and x.device.type == "cpu")


def _llama_rms_norm(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``LlamaRMSNorm.forward``: ``weight * normed.to(input_dtype)`` with
    ``normed`` computed in fp32; the result has ``weight``'s and the input's
    promoted dtype, as in eager."""
    if hidden_states.dtype not in _KERNEL_DTYPES:
        # e.g. fp64: LlamaRMSNorm normalizes in fp32 whatever the input dtype.
        normed = rms_norm(hidden_states.to(torch.float32), None, eps)
        return weight * normed.to(hidden_states.dtype)
    if weight.dtype == hidden_states.dtype:
        return rms_norm(hidden_states, weight, eps)
    # A weight of another dtype (e.g. fp32 weight, bf16 activations): the
    # kernel rounds the normalized value to the input dtype, and the product
    # promotes exactly as the eager expression does.
    return weight * rms_norm(hidden_states, None, eps)


class RMSNorm(nn.Module):
    """Replacement ``forward`` for transformers' ``LlamaRMSNorm`` (and the
    many look-alikes: Mistral, Qwen2, ...)."""

    has_backward = True
    can_torch_compile = False

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return _llama_rms_norm(hidden_states, self.weight, self.variance_epsilon)


class LayerNorm(nn.Module):
    """Replacement ``forward`` for ``torch.nn.LayerNorm`` (any
    ``normalized_shape``, with or without ``elementwise_affine`` and bias)."""

    has_backward = True
    can_torch_compile = False

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        weight: Optional[torch.Tensor] = self.weight
        bias: Optional[torch.Tensor] = self.bias
        params = [p for p in (weight, bias) if p is not None]
        if not _kernel_dtype(input) or any(p.dtype != input.dtype for p in params):
            # Mixed dtypes (e.g. fp32 parameters, bf16 input) or a dtype the
            # kernel lacks: the ops take parameters in the input's dtype, and
            # casting them would round differently from eager.
            return F.layer_norm(input, self.normalized_shape, weight, bias, self.eps)
        return layer_norm(input, weight, bias, self.eps, normalized_shape=self.normalized_shape)


class RMSNormMLP(nn.Module):
    """Llama's post-attention RMSNorm followed by its SwiGLU MLP, as one layer:
    ``down_proj(silu(gate_proj(h)) * up_proj(h))`` with ``h = rmsnorm(x)``.

    The norm and the activation are the fused kernels; when both projections
    are plain ``nn.Linear`` and no gradient is recorded, they write straight
    into the two halves of the activation's input, so no concatenation copy is
    made."""

    has_backward = True
    can_torch_compile = False

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        h = _llama_rms_norm(hidden_states, self.weight, self.variance_epsilon)
        gate_up = _gate_up(self.gate_proj, self.up_proj, h)
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
    # out is a column block of a row-major buffer, a layout BLAS writes to directly.
    if linear.bias is None:
        torch.mm(x2d, linear.weight.t(), out=out)
    else:
        torch.addmm(linear.bias, x2d, linear.weight.t(), out=out)
