"""One module per backend behind one interface (kernel_builder.compile.backends.base)."""

from __future__ import annotations

from kernel_builder.compile.backends.base import Backend, Unavailable, tool_version

__all__ = ["Backend", "Unavailable", "get_backend", "tool_version"]


def get_backend(name: str) -> Backend:
    from kernel_builder.compile.backends import cpu, cuda, metal, rocm, xpu

    backends = {
        "cpu": cpu.CpuBackend(),
        "cuda": cuda.CudaBackend(),
        "rocm": rocm.RocmBackend(),
        "metal": metal.MetalBackend(),
        "xpu": xpu.XpuBackend(),
    }
    return backends[name]
