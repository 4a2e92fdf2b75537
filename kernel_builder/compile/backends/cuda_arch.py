"""Which CUDA architecture a development build (`kbuild dev`) compiles: one, not the dozen a
release embeds, so a CUDA edit costs one nvcc pass per file instead of twelve.

In order: the architectures `--cuda-arch` names; else this machine's GPUs' (nvidia-smi,
else torch in the build environment); else the newest one the kernel's CUDA units list (or
the defaults of nvcc's CUDA release) that nvcc compiles for. An architecture nvcc cannot
compile for is a one-line UsageError."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from kernel_builder.compile.backends.cuda import (
    _base,
    default_capabilities,
    nvcc_architectures,
    nvcc_path,
    nvcc_version,
    units_for_version,
    unsupported_arch,
)
from kernel_builder.errors import UsageError
from kernel_builder.kernel.manifest import Manifest
from kernel_builder.variants import parse_version

# Asks torch for every visible GPU's capability where nvidia-smi is missing (a container
# with only the driver's libraries).
_TORCH_PROBE = (
    "import torch\n"
    "if torch.cuda.is_available():\n"
    "    for i in range(torch.cuda.device_count()):\n"
    "        print('%d.%d' % torch.cuda.get_device_capability(i))\n"
)


@dataclass(frozen=True)
class ArchChoice:
    archs: tuple[str, ...]
    reason: str  # for the one line kbuild dev prints: "this machine's GPU", "--cuda-arch", ...

    def describe(self) -> str:
        return f"sm {', '.join(self.archs)} ({self.reason})"


def local_gpu_capabilities(python: str | None = None) -> tuple[str, ...]:
    """The compute capabilities of this machine's GPUs, distinct, in device order; () without one."""
    found: list[str] = []
    smi = shutil.which("nvidia-smi")
    commands = [[smi, "--query-gpu=compute_cap", "--format=csv,noheader"]] if smi else []
    if python:
        commands.append([python, "-c", _TORCH_PROBE])
    for command in commands:
        try:
            out = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        found = [line.strip() for line in out.splitlines() if _is_capability(line.strip())]
        if found:
            break
    return tuple(dict.fromkeys(found))


def _is_capability(text: str) -> bool:
    major, _, minor = text.partition(".")
    return major.isdigit() and minor.isdigit()


def choose_cuda_arch(
    manifest: Manifest,
    requested: tuple[str, ...] = (),
    gpus: tuple[str, ...] = (),
    cuda: tuple[int, int] | None = None,
    supported: frozenset[str] | None = None,
) -> ArchChoice:
    """The architectures to compile (see the module doc). `cuda` and `supported` are nvcc's
    release and `--list-gpu-arch`; None (no nvcc found here) checks nothing, and the build
    then says which nvcc it lacks."""

    def check(arch: str, hint: str = "") -> str:
        if supported is not None and _base(arch) not in supported:
            raise UsageError(unsupported_arch(arch, cuda, supported) + hint)
        return arch

    if requested:
        return ArchChoice(tuple(check(a) for a in requested), "--cuda-arch")
    if gpus:
        hint = " (this machine's GPU; pass --cuda-arch to compile another)"
        return ArchChoice(tuple(check(a, hint) for a in gpus), "this machine's GPU")
    listed = [
        _base(c) for unit in (units_for_version(manifest, cuda) if cuda else manifest.units_for("cuda"))
        for c in (unit.cuda_capabilities or (default_capabilities(cuda) if cuda else ()))
    ]
    usable = sorted({c for c in listed if supported is None or c in supported}, key=parse_version)
    if not usable:
        where = f"nvcc {cuda[0]}.{cuda[1]} compiles for" if cuda else "the kernel lists"
        raise UsageError(f"no GPU here and none of the architectures {where} is listed by the kernel: pass --cuda-arch")
    return ArchChoice((usable[-1],), "no GPU here: the newest the kernel lists that nvcc compiles for")


def dev_cuda_arch(manifest: Manifest, requested: tuple[str, ...] = (), python: str | None = None) -> ArchChoice:
    """choose_cuda_arch for this machine: its GPUs and its nvcc (the system one, as `kbuild
    build` prefers it)."""
    nvcc = nvcc_path()
    cuda = nvcc_version(nvcc) if nvcc else None
    supported = nvcc_architectures(nvcc) if nvcc and cuda else None
    gpus = () if requested else local_gpu_capabilities(python)
    return choose_cuda_arch(manifest, requested, gpus, cuda, supported)
