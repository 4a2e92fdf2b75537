"""PyTorch references the kernel is checked against (no kernel code here)."""

import torch
import torch.nn.functional as F
from torch import nn

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# fp64 is a CPU-only extra of the kernel (it makes gradcheck possible).
CPU_DTYPES = DTYPES + [torch.float64]


def llama_rms_norm(x, weight, eps):
    """transformers' LlamaRMSNorm.forward (models/llama/modeling_llama.py, 5.22)."""
    input_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return h.to(input_dtype) if weight is None else weight * h.to(input_dtype)


class LlamaRMSNorm(nn.Module):
    """transformers' LlamaRMSNorm, re-implemented from its source so that the
    tests do not need transformers (LlamaRMSNorm is equivalent to T5LayerNorm)."""

    def __init__(self, hidden_size, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaMLP(nn.Module):
    """transformers' LlamaMLP structure and attribute names."""

    def __init__(self, hidden_size, intermediate_size, bias=False):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def layer_norm_fp(x, weight, bias, eps, dtype=torch.float64):
    """F.layer_norm over the last dim, computed in `dtype` (default fp64)."""
    n = x.shape[-1]
    w = None if weight is None else weight.to(dtype)
    b = None if bias is None else bias.to(dtype)
    return F.layer_norm(x.to(dtype), (n,), w, b, eps)


def rms_norm_fp(x, weight, eps, dtype=torch.float64):
    """RMSNorm in `dtype` with a single rounding (no intermediate cast)."""
    h = x.to(dtype)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return h if weight is None else h * weight.to(dtype)


def silu_and_mul(x):
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def ulp(dtype):
    """Relative spacing of the dtype's values (one unit in the last place)."""
    return torch.finfo(dtype).eps
