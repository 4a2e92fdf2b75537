"""Test infrastructure shipped with kbuild: a local Hugging Face Hub (see hub.py).

The names are loaded on first use, so that `python -m kernel_builder.testing.hub` runs the
module once, as __main__, without importing it a second time through this package.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["READ_TOKEN", "TEST_USER", "WRITE_TOKEN", "HubServer", "RequestRecord"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module(".hub", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
