"""Pick the variant folder this machine loads, by the `kernels` 0.17 runtime's rules
(FORMATS.md, "How the kernels runtime picks").

Acceptance:
- compiled variants (exact-torch and stable-ABI) need the CPU architecture and OS to match
  exactly, and an interpreter that loads abi3 extensions;
- an exact-torch variant needs torch major.minor to match, and its cxx11/cxx98 tag (when it
  has one) to equal `torch.compiled_with_cxx11_abi()`;
- a stable-ABI variant loads on its ABI version and any newer torch;
- CUDA: the variant's CUDA major must equal the system's and its minor be <= the system's;
  other backends must match by name and version (the compute tag);
- Metal variants need darwin (and macOS 26, which their `-std=metal4.0` build requires);
- `torch-<backend>` (noarch) loads when the backend matches; `torch-universal` always.

Preference, best first: accepted before rejected; stable-ABI (newest ABI first, then the
highest backend minor); exact-torch (tagless before tagged, then the highest backend minor);
`torch-<backend>`; `torch-universal`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kernel_builder.runtime.system import METAL_MIN_MACOS, System
from kernel_builder.variants import Kind, Variant, try_parse


@dataclass(frozen=True)
class Decision:
    """Whether one variant folder can load here, and why (a short human sentence)."""

    variant: Variant
    accepted: bool
    reason: str

    @property
    def name(self) -> str:
        return self.variant.name

    def __str__(self) -> str:
        return f"{self.name}: {'accepted' if self.accepted else 'rejected'}, {self.reason}"


def _pair(v: tuple[int, int] | None) -> str:
    return "unknown" if v is None else f"{v[0]}.{v[1]}"


def _backend_str(backend: str, version: tuple[int, int] | None) -> str:
    names = {"cpu": "CPU", "cuda": "CUDA", "rocm": "ROCm", "metal": "Metal", "xpu": "XPU"}
    label = names.get(backend, backend)
    return label if version is None else f"{label} {_pair(version)}"


def _rejection(v: Variant, s: System) -> str | None:
    """Why `v` cannot load on `s`, or None when it can."""
    if v.kind is Kind.NOARCH:
        if v.backend == "universal" or v.backend == s.backend:
            return None
        return f"pure-Python build for {v.backend}, but the backend here is {s.backend}"

    if not s.abi3:
        return "compiled kernels need abi3 support, which free-threaded Python before 3.15 lacks"
    if v.arch != s.arch:
        return f"built for CPU {v.arch}, this machine is {s.arch}"
    if v.os != s.os:
        return f"built for OS {v.os}, this machine runs {s.os}"
    if s.torch is None:
        return "torch is not installed"

    if v.kind is Kind.ARCH:
        if v.torch != s.torch:
            return f"torch {v.torch_version} does not match the installed torch {_pair(s.torch)}"
        if v.cxx11 is not None and v.cxx11 != s.cxx11:
            want = "cxx11" if v.cxx11 else "pre-cxx11 (cxx98)"
            have = {True: "the cxx11 ABI", False: "the pre-cxx11 ABI", None: "no C++ ABI tag"}[s.cxx11]
            return f"built for the {want} C++ ABI, the installed torch uses {have}"
    else:  # stable ABI
        assert v.torch is not None
        if v.torch > s.torch:
            return f"needs torch stable ABI {v.torch_version}, newer than the installed torch {_pair(s.torch)}"

    if v.backend == "metal" and v.os != "darwin":
        return "Metal builds only load on macOS (darwin)"

    if v.backend == "cuda" and s.backend == "cuda":
        if v.backend_version is None or s.backend_version is None:
            return "CUDA version unknown"
        if v.backend_version[0] != s.backend_version[0] or v.backend_version[1] > s.backend_version[1]:
            return (
                f"CUDA {v.backend_version_str} is not compatible with CUDA {_pair(s.backend_version)} here "
                "(the major must match and the minor be at most the system's)"
            )
    elif v.backend != s.backend or v.backend_version != s.backend_version:
        return (
            f"built for {_backend_str(v.backend, v.backend_version)}, "
            f"the backend here is {_backend_str(s.backend, s.backend_version)}"
        )

    if v.backend == "metal" and (s.macos is None or s.macos < METAL_MIN_MACOS):
        return f"Metal builds need macOS {_pair(METAL_MIN_MACOS)} or later, this is macOS {_pair(s.macos)}"
    return None


def _acceptance(v: Variant, s: System) -> str:
    if v.kind is Kind.NOARCH:
        if v.backend == "universal":
            return "universal pure-Python build, loads anywhere"
        return f"pure-Python build for {v.backend}"
    backend = _backend_str(v.backend, v.backend_version)
    if v.kind is Kind.STABLE_ABI:
        return f"stable ABI {v.torch_version} <= torch {_pair(s.torch)}, {backend} on {v.platform}"
    return f"torch {v.torch_version}, {backend} on {v.platform}"


def check_variant(variant: Variant, system: System) -> Decision:
    """The decision for one variant."""
    reason = _rejection(variant, system)
    if reason is None:
        return Decision(variant, True, _acceptance(variant, system))
    return Decision(variant, False, reason)


def preference(decision: Decision) -> tuple:
    """Sort key: lower is better."""
    v = decision.variant
    rank = 0 if decision.accepted else 1
    backend_minor = -v.backend_version[1] if v.backend_version is not None else 0
    if v.kind is Kind.STABLE_ABI:
        assert v.torch is not None
        key: tuple = (0, -v.torch[0], -v.torch[1], backend_minor)
    elif v.kind is Kind.ARCH:
        key = (1, 0, 0 if v.cxx11 is None else 1, backend_minor)
    else:
        key = (3 if v.backend == "universal" else 2, 0, 0, 0)
    # The name breaks ties so the order never depends on the folder listing.
    return (rank, *key, v.name)


def select_variant(names: Iterable[str], system: System) -> tuple[Variant | None, list[Decision]]:
    """Return (the best variant or None, a decision for every name that parses as a variant),
    the decisions sorted best first. Names that are not variants (stray folders) are ignored."""
    variants = {v for v in (try_parse(n) for n in names) if v is not None}
    trace = sorted((check_variant(v, system) for v in variants), key=preference)
    best = trace[0].variant if trace and trace[0].accepted else None
    return best, trace


def format_trace(trace: list[Decision]) -> str:
    """`name (reason); name (reason)` in one line."""
    return "; ".join(f"{d.name} {'accepted' if d.accepted else 'rejected'} ({d.reason})" for d in trace)
