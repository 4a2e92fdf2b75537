"""Build variants: the folder names under `build/` that say which torch, ABI, backend,
backend version, Python, CPU architecture and OS a build is for.

Two naming styles, both read by `kernels` 0.19 (only the legacy one by 0.17/0.18); every
name, of either style, parses and formats back to the same string:

- legacy: `torch213-cxx11-cpu-x86_64-linux`, `torch214-cxx11-cu130-x86_64-linux`,
  `torch213-cxx11-rocm71-...`, `torch213-cxx11-xpu20260-...`, `torch213-metal-aarch64-darwin`
  (no ABI tag off Linux), `torch-stable-abi210-cu130-x86_64-linux`. They carry no Python
  tag: the runtime reads them as cpython-3.9-abi3.
- new: `torch-2.13-cxx11-cpu-cpython-3.9-abi3-x86_64-linux`,
  `torch-2.15-cxx11-cuda-13.0-cpython-3.10-abi3-x86_64-linux`, backends `rocm-7.2`,
  `xpu-2026.1`, `metal`; `torch-stable-abi-2.11-cuda-13.0-cpython-3.9-abi3-x86_64-linux`.
- noarch, the same in both styles: `torch-cpu`, `torch-cuda`, ... and the legacy `torch-universal`.

kernels 0.19 also knows tvm-ffi, SDK and MLX variants; kbuild builds none of them, so they
are not variants here (`try_parse` returns None).

This module is imported by the runtime loader: standard library only.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from enum import Enum
from importlib import resources

# BACKENDS and NOARCH_BACKENDS are read from here by many stages; backend_facts defines them.
from kernel_builder.backend_facts import BACKENDS, FACTS, NOARCH_BACKENDS, parse_compute, parse_new_compute  # noqa: F401
from kernel_builder.errors import VariantError

# Legacy names have no Python tag; the runtime reads them as this Python version and abi3.
LEGACY_PYTHON = (3, 9)
# Python ABIs of compiled parts, in the runtime's order of preference: abi3 (GIL builds),
# abi3t (PEP 803, free-threaded and GIL builds of Python 3.15 and later).
PYTHON_ABIS = ("abi3", "abi3t")
ABI3T_MIN_PYTHON = (3, 15)


class Kind(str, Enum):
    ARCH = "arch"  # compiled for one torch minor version
    STABLE_ABI = "stable-abi"  # compiled against torch's stable ABI, loads on that version and newer
    NOARCH = "noarch"  # pure Python (torch-noarch), one per backend, or legacy universal


class Style(str, Enum):
    """How a compiled variant's name is spelled. Noarch names are the same in both styles
    and always count as legacy."""

    LEGACY = "legacy"  # torch213-cxx11-cu130-x86_64-linux: every kernels release reads it
    NEW = "new"  # torch-2.13-cxx11-cuda-13.0-cpython-3.9-abi3-x86_64-linux: kernels >= 0.19.1

    @classmethod
    def parse(cls, text: str, option: str = "--variant-names") -> "Style":
        try:
            return cls(text)
        except ValueError:
            raise VariantError(f"{option} must be 'legacy' or 'new', got {text!r}") from None


@dataclass(frozen=True, order=True)
class Variant:
    """One build variant. `torch` is the torch (or stable ABI) version as (major, minor);
    `python` and `python_abi` are the Python the compiled parts need (at least that version)."""

    kind: Kind
    backend: str
    torch: tuple[int, int] | None = None
    backend_version: tuple[int, int] | None = None
    cxx11: bool | None = None
    arch: str | None = None
    os: str | None = None
    python: tuple[int, int] = LEGACY_PYTHON
    python_abi: str = "abi3"
    style: Style = Style.LEGACY

    def __post_init__(self) -> None:
        if self.python_abi not in PYTHON_ABIS:
            raise VariantError(f"unknown Python ABI '{self.python_abi}'; expected one of {', '.join(PYTHON_ABIS)}")
        if self.python_abi == "abi3t" and self.python < ABI3T_MIN_PYTHON:
            raise VariantError(f"abi3t needs Python {_pair(ABI3T_MIN_PYTHON)} or later, not {_pair(self.python)}")
        if self.kind is Kind.NOARCH:
            if self.style is not Style.LEGACY or not self.python_is_legacy:
                raise VariantError(f"torch-{self.backend} is pure Python: it has no naming style or Python tag")
        elif self.style is Style.LEGACY and not self.python_is_legacy:
            raise VariantError(
                f"a legacy variant name cannot say cpython-{_pair(self.python)}-{self.python_abi}; "
                f"it always means cpython-{_pair(LEGACY_PYTHON)}-abi3 (use the new naming style)"
            )

    # -- naming -------------------------------------------------------------------
    @property
    def compute(self) -> str:
        """The legacy compute tag, also the key of build environments: `cpu`, `metal`,
        `cu130`, `rocm71`, `xpu20260`."""
        if self.kind is Kind.NOARCH or not FACTS[self.backend].versioned:
            return self.backend
        assert self.backend_version is not None, self
        return FACTS[self.backend].compute(self.backend_version)

    @property
    def name(self) -> str:
        if self.kind is Kind.NOARCH:
            return f"torch-{self.backend}"
        assert self.torch is not None
        abi = "" if self.cxx11 is None else ("-cxx11" if self.cxx11 else "-cxx98")
        if self.style is Style.LEGACY:
            tag = f"{self.torch[0]}{self.torch[1]}"
            framework = f"torch-stable-abi{tag}" if self.kind is Kind.STABLE_ABI else f"torch{tag}{abi}"
            return f"{framework}-{self.compute}-{self.arch}-{self.os}"
        version = _pair(self.torch)
        framework = f"torch-stable-abi-{version}" if self.kind is Kind.STABLE_ABI else f"torch-{version}{abi}"
        backend = self.backend if self.backend_version is None else f"{self.backend}-{self.backend_version_str}"
        return f"{framework}-{backend}-{self.python_tag}-{self.arch}-{self.os}"

    def __str__(self) -> str:
        return self.name

    @property
    def new_style(self) -> bool:
        """Whether only kernels >= 0.19.1 can read this name (a new-style compiled variant);
        such a build's metadata.json should say `"kernels-minver": "0.19.1"`."""
        return self.style is Style.NEW

    @property
    def python_tag(self) -> str:
        """`cpython-3.9-abi3`: the Python the compiled parts load on (legacy names imply it)."""
        return f"cpython-{_pair(self.python)}-{self.python_abi}"

    @property
    def python_is_legacy(self) -> bool:
        """Whether the Python tag is cpython-3.9-abi3, the one legacy names imply (and the
        one kbuild's libraries need: they use the limited API of Python 3.9)."""
        return (self.python, self.python_abi) == (LEGACY_PYTHON, "abi3")

    def with_style(self, style: Style) -> "Variant":
        """The same build named in `style`; noarch names are the same in both styles."""
        if self.kind is Kind.NOARCH or style is self.style:
            return self
        return replace(self, style=style)  # a Python tag legacy names cannot spell raises

    def other_style(self) -> "Variant | None":
        """The same build named in the other style, or None where there is none (noarch;
        a Python tag other than cpython-3.9-abi3 has no legacy name)."""
        if self.kind is Kind.NOARCH or not self.python_is_legacy:
            return None
        return self.with_style(Style.NEW if self.style is Style.LEGACY else Style.LEGACY)

    @property
    def torch_version(self) -> str | None:
        return None if self.torch is None else _pair(self.torch)

    @property
    def backend_version_str(self) -> str | None:
        return None if self.backend_version is None else _pair(self.backend_version)

    @property
    def platform(self) -> str | None:
        """`x86_64-linux`: the part a machine must match exactly."""
        return None if self.arch is None else f"{self.arch}-{self.os}"

    def sort_key(self) -> tuple:
        """Order for listings: torch version, then backend, then backend version, then
        platform, then the Python tag and the naming style."""
        return (
            self.kind.value,
            self.torch or (0, 0),
            BACKENDS.index(self.backend) if self.backend in BACKENDS else 99,
            self.backend_version or (0, 0),
            self.arch or "",
            self.os or "",
            self.python_abi,
            self.python,
            self.style.value,
        )

    # -- parsing ------------------------------------------------------------------
    @classmethod
    def parse(cls, name: str) -> "Variant":
        """Parse a variant folder name of either style; raises VariantError naming the expected forms."""
        variant = _parse(name)
        if variant is None:
            raise VariantError(
                f"'{name}' is not a variant name; expected a legacy name such as torch213-cxx11-cpu-x86_64-linux, "
                "torch213-metal-aarch64-darwin or torch-stable-abi210-cu130-x86_64-linux, a new-style name such as "
                "torch-2.13-cxx11-cpu-cpython-3.9-abi3-x86_64-linux or "
                "torch-stable-abi-2.10-cuda-13.0-cpython-3.9-abi3-x86_64-linux, or a noarch name such as torch-cpu"
            )
        return variant


def _pair(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


_SYSTEM = r"(?P<arch>[a-z0-9_]+)-(?P<os>[a-z]+)"
_CXX = r"(?:-(?P<abi>cxx11|cxx98))?"
_LEGACY_ARCH_RE = re.compile(rf"^torch(?P<major>\d)(?P<minor>\d+){_CXX}-(?P<compute>[a-z0-9]+)-{_SYSTEM}$")
_LEGACY_STABLE_RE = re.compile(rf"^torch-stable-abi(?P<major>\d)(?P<minor>\d+)-(?P<compute>[a-z0-9]+)-{_SYSTEM}$")
_NEW_TAIL = rf"-(?P<compute>[a-z]+(?:-\d+\.\d+)?)-cpython-(?P<py_major>\d+)\.(?P<py_minor>\d+)-(?P<py_abi>abi3t?)-{_SYSTEM}$"
_NEW_ARCH_RE = re.compile(rf"^torch-(?P<major>\d+)\.(?P<minor>\d+){_CXX}{_NEW_TAIL}")
_NEW_STABLE_RE = re.compile(rf"^torch-stable-abi-(?P<major>\d+)\.(?P<minor>\d+){_NEW_TAIL}")
_NOARCH_RE = re.compile(r"^torch-([a-z]+)$")

# (pattern, kind, style), tried in order: the stable-ABI forms before the noarch one.
_FORMS = (
    (_LEGACY_STABLE_RE, Kind.STABLE_ABI, Style.LEGACY),
    (_NEW_STABLE_RE, Kind.STABLE_ABI, Style.NEW),
    (_LEGACY_ARCH_RE, Kind.ARCH, Style.LEGACY),
    (_NEW_ARCH_RE, Kind.ARCH, Style.NEW),
)


def _parse(name: str) -> Variant | None:
    """The variant `name` spells, None when it spells none; VariantError for a well-formed
    name whose parts contradict each other (abi3t before Python 3.15)."""
    for pattern, kind, style in _FORMS:
        m = pattern.match(name)
        if m is None:
            continue
        parsed = (parse_compute if style is Style.LEGACY else parse_new_compute)(m["compute"])
        if parsed is None:
            return None
        backend, backend_version = parsed
        python = LEGACY_PYTHON if style is Style.LEGACY else (int(m["py_major"]), int(m["py_minor"]))
        abi = m.groupdict().get("abi")
        variant = Variant(
            kind, backend, (int(m["major"]), int(m["minor"])), backend_version,
            None if abi is None else abi == "cxx11", m["arch"], m["os"],
            python, m.groupdict().get("py_abi") or "abi3", style,
        )
        # Only canonical spellings: `torch2013` or `cuda-13.00` would not format back.
        return variant if variant.name == name else None
    if m := _NOARCH_RE.match(name):
        backend = m.group(1)
        if backend not in BACKENDS + NOARCH_BACKENDS and backend != "universal":
            return None
        return Variant(Kind.NOARCH, backend)
    return None


def try_parse(name: str) -> Variant | None:
    """Like Variant.parse, but None for names that are not kbuild variants (stray folders,
    tvm-ffi/SDK/MLX variants, contradictory Python tags)."""
    try:
        return _parse(name)
    except VariantError:
        return None


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
