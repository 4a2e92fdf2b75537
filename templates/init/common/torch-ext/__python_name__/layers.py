import torch
from torch import nn

from ._ops import ops


class ScaleAdd(nn.Module):
    """Kernel forward for a module with an `alpha` attribute computing x + alpha * y.

    kernels layers are stateless: `alpha` is read from the module whose forward this
    replaces (see kernels' `kernelize`/`use_kernel_forward_from_hub`)."""

    # The op mutates `out` and returns nothing, so torch.compile traces it as is.
    can_torch_compile = True
    # No autograd formula is registered: kernels keeps the original forward for training.
    has_backward = False

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        ops.scale_add(out, x, y, float(self.alpha))
        return out


__all__ = ["ScaleAdd"]
