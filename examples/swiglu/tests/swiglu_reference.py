"""The PyTorch references the swiglu tests compare against, and the kernel's
functions by activation name."""

import torch
import torch.nn.functional as F

ACTIVATIONS = ["silu", "gelu", "gelu_tanh"]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]

# The op names of the binding, by activation.
OPS = {"silu": "silu_and_mul", "gelu": "gelu_and_mul", "gelu_tanh": "gelu_tanh_and_mul"}


def activation(name: str, g: torch.Tensor) -> torch.Tensor:
    if name == "silu":
        return F.silu(g)
    if name == "gelu":
        return F.gelu(g)
    return F.gelu(g, approximate="tanh")


def reference(name: str, x: torch.Tensor) -> torch.Tensor:
    """The eager composite ``act(x[..., :d]) * x[..., d:]``, in x's dtype."""
    d = x.shape[-1] // 2
    return activation(name, x[..., :d]) * x[..., d:]


def reference_grad(name: str, x: torch.Tensor, grad_out: torch.Tensor, dtype=torch.float64) -> torch.Tensor:
    """d(sum(reference * grad_out))/dx by autograd, computed in `dtype` (fp64: the exact
    gradient of the given, already rounded, inputs)."""
    xr = x.detach().to(dtype).requires_grad_()
    (grad,) = torch.autograd.grad(reference(name, xr), xr, grad_out.to(dtype))
    return grad


def kernel_function(swiglu, name: str):
    """The package's differentiable function for an activation."""
    if name == "silu":
        return swiglu.silu_and_mul
    if name == "gelu":
        return swiglu.gelu_and_mul
    return swiglu.gelu_tanh_and_mul


def forward_op(swiglu, name: str):
    return getattr(swiglu.ops, OPS[name])


def backward_op(swiglu, name: str):
    return getattr(swiglu.ops, OPS[name] + "_backward")


def make_input(shape, dtype, seed=0, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(dtype)
