"""This machine as the loader sees it: CPU architecture, OS, torch version and ABI, backend,
the interpreter's Python version and whether it is free-threaded.

Detection mirrors the `kernels` runtime (0.19.1): the backend is what torch was built for
(`torch.version.cuda`, `torch.version.rocm` or `.hip`, MPS, `torch.version.xpu`), else CPU,
as `backend_facts.torch_backend` reads it.
torch is imported only when `detect_system()` is called, never at module import.
"""

from __future__ import annotations

import platform
import re
import sys
import sysconfig
from dataclasses import dataclass, field

from kernel_builder.backend_facts import FACTS, FALLBACK, torch_backend, version_pair
from kernel_builder.errors import VariantError


@dataclass(frozen=True)
class System:
    """What a build variant has to fit.

    `torch` is (major, minor) or None when torch is not importable. `cxx11` is
    `torch.compiled_with_cxx11_abi()` on Linux and None elsewhere. `backend` is one of
    cpu, cuda, rocm, metal, xpu; `backend_version` is (major, minor) for cuda/rocm and
    (year, minor) for xpu, None for cpu/metal. `macos` is the macOS version on darwin.
    `python` is the interpreter's (major, minor) and `free_threaded` whether it runs
    without the GIL (abi3 variants do not load there, abi3t ones do); both default to the
    running interpreter's.
    """

    arch: str
    os: str
    torch: tuple[int, int] | None
    cxx11: bool | None
    backend: str = FALLBACK
    backend_version: tuple[int, int] | None = None
    macos: tuple[int, int] | None = None
    python: tuple[int, int] = field(default_factory=lambda: sys.version_info[:2])
    free_threaded: bool = field(default_factory=lambda: is_free_threaded())

    @property
    def platform(self) -> str:
        return f"{self.arch}-{self.os}"

    @property
    def compute(self) -> str:
        """The backend as a variant name spells it: cpu, metal, cu130, rocm71, xpu20260."""
        record = FACTS.get(self.backend)
        if self.backend_version is None or record is None:
            return self.backend
        return record.compute(self.backend_version)

    @property
    def variant_name(self) -> str | None:
        """The exact-torch (arch) variant folder name for this machine, e.g.
        `torch213-cxx11-cpu-x86_64-linux`; None without torch."""
        if self.torch is None:
            return None
        abi = "" if self.cxx11 is None else ("-cxx11" if self.cxx11 else "-cxx98")
        return f"torch{self.torch[0]}{self.torch[1]}{abi}-{self.compute}-{self.platform}"

    def describe(self) -> str:
        """One line, e.g. `x86_64-linux, torch 2.13 (cxx11 ABI), backend cpu`."""
        if self.torch is None:
            torch = "no torch"
        else:
            torch = f"torch {self.torch[0]}.{self.torch[1]}"
            if self.cxx11 is not None:
                torch += " (cxx11 ABI)" if self.cxx11 else " (pre-cxx11 ABI)"
        backend = f"backend {self.backend}"
        if self.backend_version is not None:
            backend += f" {self.backend_version[0]}.{self.backend_version[1]}"
        parts = [self.platform, torch, backend]
        if self.os == "darwin" and self.macos is not None:
            parts.append(f"macOS {self.macos[0]}.{self.macos[1]}")
        parts.append(f"Python {self.python[0]}.{self.python[1]}" + (" (free-threaded)" if self.free_threaded else ""))
        return ", ".join(parts)


# -- detection -------------------------------------------------------------------------
def detect_arch() -> str:
    """This machine's CPU architecture in variant spelling: x86_64, aarch64."""
    machine = platform.machine().lower()
    return {"arm64": "aarch64", "amd64": "x86_64"}.get(machine, machine)


def detect_os() -> str:
    return platform.system().lower()


def host_platform() -> tuple[str, str]:
    """(arch, os) in variant spelling: x86_64/aarch64, linux/darwin."""
    return detect_arch(), detect_os()


def _macos_version() -> tuple[int, int] | None:
    release = platform.mac_ver()[0]
    if not release:
        return None
    parts = [int(p) for p in re.findall(r"\d+", release)[:2]]
    return (parts[0], parts[1] if len(parts) > 1 else 0) if parts else None


def is_free_threaded() -> bool:
    """Whether this interpreter is a free-threaded (no-GIL) build."""
    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def detect_system(backend: str | None = None) -> System:
    """Describe this machine. `backend` overrides the detected backend like the `kernels`
    `backend=` argument: only the fallback (cpu) or the backend torch was built for are allowed."""
    arch, os_ = detect_arch(), detect_os()
    try:
        import torch
    except ImportError:
        torch = None

    if torch is None:
        torch_version, cxx11, detected = None, None, (FALLBACK, None)
    else:
        torch_version = version_pair(torch.__version__)
        cxx11 = bool(torch.compiled_with_cxx11_abi()) if os_ == "linux" else None
        detected = torch_backend(torch)

    name, version = detected
    if backend is not None and backend != name:
        allowed = sorted({FALLBACK, name})
        if backend != FALLBACK:
            raise VariantError(
                f"invalid backend '{backend}'; allowed here: {', '.join(allowed)} "
                f"(\"{FALLBACK}\" or the backend torch was built for), or leave it unset to detect it"
            )
        name, version = FALLBACK, None

    return System(
        arch=arch,
        os=os_,
        torch=torch_version,
        cxx11=cxx11,
        backend=name,
        backend_version=version,
        macos=_macos_version() if os_ == "darwin" else None,
        python=sys.version_info[:2],
        free_threaded=is_free_threaded(),
    )
