"""The thin runtime loader: pick this machine's build variant, verify its digests, import it.

Imports only the standard library (and torch, lazily, when detecting the system): never
huggingface_hub, typer, jinja2 or rich, so kernel users pay nothing for the CLI.
"""

from kernel_builder.runtime.digest import hash_variant, verify_digest
from kernel_builder.runtime.loader import (
    DigestMismatchError,
    KernelLoadError,
    find_variant,
    load_local,
    read_metadata,
)
from kernel_builder.runtime.select import Decision, select_variant
from kernel_builder.runtime.system import System, detect_system

__all__ = [
    "Decision",
    "DigestMismatchError",
    "KernelLoadError",
    "System",
    "detect_system",
    "find_variant",
    "hash_variant",
    "load_local",
    "read_metadata",
    "select_variant",
    "verify_digest",
]
