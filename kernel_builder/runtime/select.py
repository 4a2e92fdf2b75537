"""Pick the variant folder this machine loads, by the `kernels` 0.19.1 runtime's rules
(its `_resolve_variant_for_system` and `_sort_variants`), for variant names of both styles.

Acceptance, in the runtime's order of checks:
- compiled variants (exact-torch and stable-ABI) first need an interpreter that loads their
  Python tag (abi3 never loads on free-threaded Python; the variant's Python version must
  not be newer than the interpreter's; legacy names count as cpython-3.9-abi3), then the
  CPU architecture and OS to match exactly;
- an exact-torch variant needs torch major.minor to match, and its cxx11/cxx98 tag (when it
  has one) to equal `torch.compiled_with_cxx11_abi()`;
- a stable-ABI variant loads on its ABI version and any newer torch;
- CUDA and ROCm: the variant's major must equal the system's and its minor be <= the
  system's; other backends must match by name and version;
- Metal variants need macOS 26 (their `-std=metal4.0` build requires it);
- `torch-<backend>` (noarch) loads when the backend matches; `torch-universal` always.

Preference, best first: accepted before rejected; stable-ABI (newest ABI first); exact-torch
(tagless before cxx11/cxx98-tagged); within those, the highest backend minor, then abi3
before abi3t, then the highest Python version; then `torch-<backend>`; then `torch-universal`.
The runtime leaves ties (one build under a legacy and a new-style name) to the folder
listing; kbuild breaks them by name, so its choice never depends on the listing.

kernels 0.19.1 also picks tvm-ffi, SDK and MLX variants; kbuild builds none of them and
ignores their folders like any other name that is not a kbuild variant.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kernel_builder.backend_facts import FACTS, label
from kernel_builder.runtime.system import System
from kernel_builder.variants import PYTHON_ABIS, Kind, Variant, try_parse


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


def _python_rejection(v: Variant, s: System) -> str | None:
    if v.python_abi == "abi3" and s.free_threaded:
        return "abi3 builds do not load on free-threaded Python (that needs an abi3t build)"
    if v.python > s.python:
        return f"needs Python {_pair(v.python)} or later ({v.python_tag}), this interpreter is Python {_pair(s.python)}"
    return None


def _backend_rejection(v: Variant, s: System) -> str | None:
    record = FACTS.get(v.backend)
    if v.backend == s.backend and record is not None and record.minor_compatible:
        # A toolkit x.z build loads on x.y for z <= y.
        name = record.display
        if v.backend_version is None or s.backend_version is None:
            return f"{name} version unknown"
        if v.backend_version[0] != s.backend_version[0] or v.backend_version[1] > s.backend_version[1]:
            return (
                f"{name} {v.backend_version_str} is not compatible with {name} {_pair(s.backend_version)} here "
                "(the major must match and the minor be at most the system's)"
            )
        return None
    if v.backend != s.backend or v.backend_version != s.backend_version:
        return (
            f"built for {label(v.backend, v.backend_version)}, "
            f"the backend here is {label(s.backend, s.backend_version)}"
        )
    min_macos = record.min_macos if record else None
    if min_macos and (s.macos is None or s.macos < min_macos):
        here = "this machine does not run macOS" if s.macos is None else f"this is macOS {_pair(s.macos)}"
        return f"{record.display} builds need macOS {_pair(min_macos)} or later, {here}"
    return None


def _rejection(v: Variant, s: System) -> str | None:
    """Why `v` cannot load on `s`, or None when it can."""
    if v.kind is Kind.NOARCH:
        if v.backend == "universal" or v.backend == s.backend:
            return None
        return f"pure-Python build for {v.backend}, but the backend here is {s.backend}"

    reason = _python_rejection(v, s)
    if reason:
        return reason
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
    return _backend_rejection(v, s)


def _acceptance(v: Variant, s: System) -> str:
    if v.kind is Kind.NOARCH:
        if v.backend == "universal":
            return "universal pure-Python build, loads anywhere"
        return f"pure-Python build for {v.backend}"
    backend = label(v.backend, v.backend_version)
    if v.kind is Kind.STABLE_ABI:
        return f"stable ABI {v.torch_version} <= torch {_pair(s.torch)}, {backend} on {v.platform}, {v.python_tag}"
    return f"torch {v.torch_version}, {backend} on {v.platform}, {v.python_tag}"


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
    if v.kind is Kind.NOARCH:
        key: tuple = (3 if v.backend == "universal" else 2, 0, 0, 0, 0, 0)
    else:
        assert v.torch is not None
        if v.kind is Kind.STABLE_ABI:
            framework = (0, -v.torch[0], -v.torch[1])
        else:
            framework = (1, 0, 0 if v.cxx11 is None else 1)
        # The runtime compares only the minor: accepted CUDA/ROCm builds share the system's major.
        backend_minor = -v.backend_version[1] if v.backend_version is not None else 0
        python = (PYTHON_ABIS.index(v.python_abi), -v.python[0], -v.python[1])
        key = (*framework, backend_minor, *python)
    # The name breaks ties so the order never depends on the folder listing.
    return (rank, *key, v.name)


def select_variant(names: Iterable[str], system: System) -> tuple[Variant | None, list[Decision]]:
    """Return (the best variant or None, a decision for every name that parses as a variant),
    the decisions sorted best first. Names that are not kbuild variants (stray folders,
    tvm-ffi/SDK/MLX variants) are ignored."""
    variants = {v for v in (try_parse(n) for n in names) if v is not None}
    trace = sorted((check_variant(v, system) for v in variants), key=preference)
    best = trace[0].variant if trace and trace[0].accepted else None
    return best, trace


def format_trace(trace: list[Decision]) -> str:
    """`name (reason); name (reason)` in one line."""
    return "; ".join(f"{d.name} {'accepted' if d.accepted else 'rejected'} ({d.reason})" for d in trace)
