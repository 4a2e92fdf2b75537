"""Pick the variant folder this machine loads, by the kernels runtime's rules (FORMATS.md)."""

from __future__ import annotations

from dataclasses import dataclass

from kernel_builder.runtime.system import System
from kernel_builder.variants import Kind, Variant, try_parse


@dataclass(frozen=True)
class Decision:
    variant: Variant
    reason: str | None  # None = accepted


def _reject(v: Variant, s: System) -> str | None:
    if v.kind is Kind.NOARCH:
        if v.backend in (s.backend, "universal"):
            return None
        return f"backend {v.backend} does not match this machine's {s.backend}"
    if v.platform != f"{s.arch}-{s.os}":
        return f"platform {v.platform} does not match this machine's {s.arch}-{s.os}"
    if s.torch is None:
        return "torch is not installed"
    if v.kind is Kind.ARCH:
        if v.torch != s.torch:
            return f"torch {v.torch_version} does not match the installed torch {s.torch[0]}.{s.torch[1]}"
        if v.cxx11 is not None and v.cxx11 != s.cxx11:
            return "its C++ ABI (cxx11 tag) does not match the installed torch"
    elif v.torch > s.torch:
        return f"stable ABI {v.torch_version} is newer than the installed torch"
    if v.backend != s.backend:
        return f"backend {v.backend} does not match this machine's {s.backend}"
    if v.backend == "cuda" and s.backend_version:
        if v.backend_version[0] != s.backend_version[0] or v.backend_version[1] > s.backend_version[1]:
            return f"CUDA {v.backend_version_str} is not compatible with this machine's CUDA {s.backend_version[0]}.{s.backend_version[1]}"
    elif v.backend_version != s.backend_version:
        return f"{v.backend} {v.backend_version_str} does not match this machine's {s.backend_version}"
    if v.backend == "metal" and s.os != "darwin":
        return "Metal needs macOS"
    return None


def _preference(v: Variant) -> tuple:
    minor = -(v.backend_version[1]) if v.backend_version else 0
    if v.kind is Kind.STABLE_ABI:
        return (0, -v.torch[0], -v.torch[1], minor)
    if v.kind is Kind.ARCH:
        return (1, 0, 1 if v.cxx11 is not None else 0, minor)
    return (2 if v.backend != "universal" else 3, 0, 0, 0)


def select_variant(names: list[str], system: System) -> tuple[Variant | None, list[Decision]]:
    """(best variant or None, a decision with its reason for every parseable name)."""
    variants = [v for v in (try_parse(n) for n in names) if v is not None]
    trace = [Decision(v, _reject(v, system)) for v in variants]
    accepted = sorted((d.variant for d in trace if d.reason is None), key=_preference)
    return (accepted[0] if accepted else None), trace
