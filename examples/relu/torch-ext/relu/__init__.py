"""ReLU kernel: ``relu(x)`` computes ``max(x, 0)`` element-wise.

The compiled op lives in ``torch.ops.<namespace>.relu(out, input)``; the
namespace is build-specific and reached through ``._ops``.
"""

from typing import Optional

import torch

from . import layers
from ._ops import ops


def relu(x: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Return ``max(x, 0)``; writes into ``out`` when it is given."""
    if out is None:
        out = torch.empty_like(x)
    ops.relu(out, x)
    return out


__all__ = ["layers", "relu"]
