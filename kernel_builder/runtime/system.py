"""This machine as the loader sees it: CPU, OS, torch and the backend torch was built for."""

from __future__ import annotations

import platform
from dataclasses import dataclass

from kernel_builder.errors import KbuildError


@dataclass(frozen=True)
class System:
    arch: str
    os: str
    torch: tuple[int, int] | None
    cxx11: bool | None
    backend: str  # cpu, cuda, rocm, metal, xpu
    backend_version: tuple[int, int] | None = None

    def describe(self) -> str:
        torch = "no torch" if self.torch is None else f"torch {self.torch[0]}.{self.torch[1]}"
        version = "" if self.backend_version is None else " {}.{}".format(*self.backend_version)
        return f"{self.arch}-{self.os}, {torch}, {self.backend}{version}"


def _version(text: str) -> tuple[int, int]:
    parts = text.split("-")[0].split(".")
    return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0


def detect_system(backend: str | None = None) -> System:
    """Detect the machine; `backend` may force "cpu" or torch's own backend."""
    import torch

    arch = platform.machine().lower()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch)
    os_ = platform.system().lower()
    torch_version = _version(torch.__version__)
    cxx11 = bool(torch.compiled_with_cxx11_abi()) if os_ == "linux" else None
    native: tuple[str, tuple[int, int] | None]
    if torch.version.cuda:
        native = ("cuda", _version(torch.version.cuda))
    elif getattr(torch.version, "hip", None):
        native = ("rocm", _version(torch.version.hip))
    elif torch.backends.mps.is_available():
        native = ("metal", None)
    elif getattr(torch.version, "xpu", None):
        xpu = torch.version.xpu
        native = ("xpu", (int(xpu[0:4]), int(xpu[5:6] or 0)))
    else:
        native = ("cpu", None)
    if backend is not None and backend not in ("cpu", native[0]):
        raise KbuildError(f"backend {backend!r} is not available here; choose 'cpu' or '{native[0]}'")
    chosen = ("cpu", None) if backend == "cpu" else native
    return System(arch, os_, torch_version, cxx11, chosen[0], chosen[1])
