"""The thin runtime loader: pick this machine's build variant, verify its digests, import it.

Imports only the standard library (and torch, lazily, when detecting the system): never
huggingface_hub, typer, jinja2 or rich, so kernel users pay nothing for the CLI.
"""

from kernel_builder.runtime.digest import hash_variant, verify_digest
from kernel_builder.runtime.hub import (
    FetchedKernel,
    HubRequestError,
    KernelNotFoundError,
    KernelOfflineError,
    fetch_kernel,
    get_kernel,
)
from kernel_builder.runtime.loader import (
    DigestMismatchError,
    KernelLoadError,
    SignatureRefusedError,
    find_variant,
    load_local,
    read_metadata,
)
from kernel_builder.runtime.select import Decision, select_variant
from kernel_builder.runtime.signatures import SignaturePolicy
from kernel_builder.runtime.system import System, detect_system
from kernel_builder.runtime.trust import UntrustedKernelError, trusted_namespaces
from kernel_builder.runtime.versions import KernelVersionError

__all__ = [
    "Decision",
    "DigestMismatchError",
    "FetchedKernel",
    "HubRequestError",
    "KernelLoadError",
    "KernelNotFoundError",
    "KernelOfflineError",
    "KernelVersionError",
    "SignaturePolicy",
    "SignatureRefusedError",
    "System",
    "UntrustedKernelError",
    "detect_system",
    "fetch_kernel",
    "find_variant",
    "get_kernel",
    "hash_variant",
    "load_local",
    "read_metadata",
    "select_variant",
    "trusted_namespaces",
    "verify_digest",
]
