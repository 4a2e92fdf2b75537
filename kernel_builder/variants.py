"""Build variants: the folder names under `build/` that say which torch, ABI, backend,
backend version, CPU architecture and OS a build is for.

Forms (FORMATS.md), all of which parse and format back to the same string:

- `torch213-cxx11-cpu-x86_64-linux`, `torch214-cxx11-cu130-x86_64-linux`
- `torch213-metal-aarch64-darwin` (no ABI tag off Linux)
- `torch-stable-abi210-cu130-x86_64-linux`
- `torch-cpu`, `torch-cuda` (noarch) and the legacy `torch-universal`

This module is imported by the runtime loader: standard library only.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from enum import Enum
from importlib import resources

from kernel_builder.errors import VariantError

BACKENDS = ("cpu", "cuda", "metal", "rocm", "xpu")

# Compute tags: backend name -> (prefix in the variant name, digits of the major part or
# None for "all but the last digit"). XPU versions are year + minor (xpu20260 = 2026.0).
_COMPUTE_RE = re.compile(r"^(?:(cpu)|(metal)|cu(\d{2,3})|rocm(\d{2,3})|xpu(\d{5}))$")


class Kind(str, Enum):
    ARCH = "arch"  # compiled for one torch minor version
    STABLE_ABI = "stable-abi"  # compiled against torch's stable ABI, loads on that version and newer
    NOARCH = "noarch"  # pure Python (torch-noarch), one per backend, or legacy universal


@dataclass(frozen=True, order=True)
class Variant:
    """One build variant. `torch` is the torch (or stable ABI) version as (major, minor)."""

    kind: Kind
    backend: str
    torch: tuple[int, int] | None = None
    backend_version: tuple[int, int] | None = None
    cxx11: bool | None = None
    arch: str | None = None
    os: str | None = None

    # -- naming -------------------------------------------------------------------
    @property
    def compute(self) -> str:
        """`cpu`, `metal`, `cu130`, `rocm71`, `xpu20260`."""
        if self.backend in ("cpu", "metal") or self.kind is Kind.NOARCH:
            return self.backend
        assert self.backend_version is not None, self
        major, minor = self.backend_version
        prefix = {"cuda": "cu", "rocm": "rocm", "xpu": "xpu"}[self.backend]
        return f"{prefix}{major}{minor}"

    @property
    def name(self) -> str:
        if self.kind is Kind.NOARCH:
            return f"torch-{self.backend}"
        assert self.torch is not None
        torch_tag = f"{self.torch[0]}{self.torch[1]}"
        if self.kind is Kind.STABLE_ABI:
            return f"torch-stable-abi{torch_tag}-{self.compute}-{self.arch}-{self.os}"
        abi = "" if self.cxx11 is None else ("-cxx11" if self.cxx11 else "-cxx98")
        return f"torch{torch_tag}{abi}-{self.compute}-{self.arch}-{self.os}"

    def __str__(self) -> str:
        return self.name

    @property
    def torch_version(self) -> str | None:
        return None if self.torch is None else f"{self.torch[0]}.{self.torch[1]}"

    @property
    def backend_version_str(self) -> str | None:
        if self.backend_version is None:
            return None
        return f"{self.backend_version[0]}.{self.backend_version[1]}"

    @property
    def platform(self) -> str | None:
        """`x86_64-linux`: the part a machine must match exactly."""
        return None if self.arch is None else f"{self.arch}-{self.os}"

    def sort_key(self) -> tuple:
        """Order for listings: torch version, then backend, then backend version, then platform."""
        return (
            self.kind.value,
            self.torch or (0, 0),
            BACKENDS.index(self.backend) if self.backend in BACKENDS else 99,
            self.backend_version or (0, 0),
            self.arch or "",
            self.os or "",
        )

    # -- parsing ------------------------------------------------------------------
    @classmethod
    def parse(cls, name: str) -> "Variant":
        """Parse a variant folder name; raises VariantError naming the expected forms."""
        variant = _parse(name)
        if variant is None:
            raise VariantError(
                f"'{name}' is not a variant name; expected e.g. torch213-cxx11-cpu-x86_64-linux, "
                "torch213-metal-aarch64-darwin, torch-stable-abi210-cu130-x86_64-linux or torch-cpu"
            )
        return variant


def _parse_compute(tag: str) -> tuple[str, tuple[int, int] | None] | None:
    m = _COMPUTE_RE.match(tag)
    if not m:
        return None
    cpu, metal, cu, rocm, xpu = m.groups()
    if cpu:
        return "cpu", None
    if metal:
        return "metal", None
    if cu:
        return "cuda", (int(cu[:-1]), int(cu[-1]))
    if rocm:
        return "rocm", (int(rocm[:-1]), int(rocm[-1]))
    return "xpu", (int(xpu[:4]), int(xpu[4:]))


_ARCH_RE = re.compile(r"^torch(\d)(\d+)(?:-(cxx11|cxx98))?-([a-z0-9]+)-([a-z0-9_]+)-([a-z]+)$")
_STABLE_RE = re.compile(r"^torch-stable-abi(\d)(\d+)-([a-z0-9]+)-([a-z0-9_]+)-([a-z]+)$")
_NOARCH_RE = re.compile(r"^torch-([a-z]+)$")


def _parse(name: str) -> Variant | None:
    if m := _STABLE_RE.match(name):
        major, minor, compute, arch, os_ = m.groups()
        parsed = _parse_compute(compute)
        if parsed is None:
            return None
        backend, backend_version = parsed
        return Variant(Kind.STABLE_ABI, backend, (int(major), int(minor)), backend_version, None, arch, os_)
    if m := _ARCH_RE.match(name):
        major, minor, abi, compute, arch, os_ = m.groups()
        parsed = _parse_compute(compute)
        if parsed is None:
            return None
        backend, backend_version = parsed
        cxx11 = None if abi is None else abi == "cxx11"
        return Variant(Kind.ARCH, backend, (int(major), int(minor)), backend_version, cxx11, arch, os_)
    if m := _NOARCH_RE.match(name):
        backend = m.group(1)
        if backend not in BACKENDS and backend != "universal":
            return None
        return Variant(Kind.NOARCH, backend)
    return None


def try_parse(name: str) -> Variant | None:
    """Like Variant.parse, but None for names that are not variants (e.g. stray folders)."""
    return _parse(name)


# -- constructors ---------------------------------------------------------------------
def arch_variant(
    torch: tuple[int, int],
    backend: str,
    backend_version: tuple[int, int] | None,
    arch: str,
    os_: str,
) -> Variant:
    """An arch variant; Linux builds carry the cxx11 tag, others none (FORMATS.md)."""
    return Variant(Kind.ARCH, backend, torch, backend_version, True if os_ == "linux" else None, arch, os_)


def stable_abi_variant(
    abi: tuple[int, int], backend: str, backend_version: tuple[int, int] | None, arch: str, os_: str
) -> Variant:
    return Variant(Kind.STABLE_ABI, backend, abi, backend_version, None, arch, os_)


def noarch_variant(backend: str) -> Variant:
    return Variant(Kind.NOARCH, backend)


def xpu_version(text: str) -> tuple[int, int] | None:
    """(year, minor) from torch.version.xpu: "20250101" (YYYYMMPP, what torch reports for
    oneAPI 2025.1.1), "20260" (the variant spelling) or "2026.0"."""
    m = re.fullmatch(r"(\d{4})\.(\d+)(?:\.\d+)*", text) or re.fullmatch(r"(\d{4})(\d{2})\d{2}", text)
    m = m or re.fullmatch(r"(\d{4})(\d)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def parse_version(text: str) -> tuple[int, int]:
    """'2.13' or '2.13.0+cpu' -> (2, 13)."""
    m = re.match(r"^(\d+)\.(\d+)", text)
    if not m:
        raise VariantError(f"'{text}' is not a version; expected MAJOR.MINOR such as 2.13")
    return int(m.group(1)), int(m.group(2))


# -- the default matrix ---------------------------------------------------------------
@dataclass(frozen=True)
class Matrix:
    """The default variant matrix (kernel_builder/data/matrix.toml)."""

    variants: tuple[Variant, ...] = field(default_factory=tuple)

    def for_backend(self, backend: str) -> list[Variant]:
        return [v for v in self.variants if v.backend == backend]


def default_matrix() -> Matrix:
    text = resources.files("kernel_builder").joinpath("data/matrix.toml").read_text()
    return matrix_from_toml(tomllib.loads(text))


def matrix_from_toml(data: dict) -> Matrix:
    """Expand `[[torch]]` entries: each names a torch version and, per backend, its toolkit
    versions and platforms."""
    variants: list[Variant] = []
    for entry in data["torch"]:
        torch = parse_version(entry["version"])
        for backend in BACKENDS:
            spec = entry.get(backend)
            if spec is None:
                continue
            versions = [parse_version(v) for v in spec.get("versions", [])] or [None]
            for platform in spec["platforms"]:
                arch, os_ = platform.split("-", 1)
                for version in versions:
                    variants.append(arch_variant(torch, backend, version, arch, os_))
    return Matrix(tuple(sorted(variants, key=Variant.sort_key)))
