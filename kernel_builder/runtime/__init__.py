"""The thin runtime loader: pick this machine's variant, verify its digests, import it.

Imports only the standard library (and torch, when loading): never huggingface_hub,
typer, jinja2 or rich."""

from kernel_builder.runtime.digest import hash_variant, verify_digest
from kernel_builder.runtime.loader import DigestMismatchError, KernelLoadError, find_variant, load_local
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
    "select_variant",
    "verify_digest",
]
