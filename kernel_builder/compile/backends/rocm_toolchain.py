"""ROCm's toolchain: hipcc and the clang behind it, the ROCm install they belong to, and
which of a kernel's archs they compile, with the flags torch's extension builder passes.

The archs are the unit's `rocm-archs` (or FORMATS.md's defaults) that the installed
hipcc can compile: a dry run (`-###`) rejects processors its clang does not know and
those without device libraries, which costs a fraction of a second and is cached."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

from kernel_builder.errors import BuildError
from kernel_builder.kernel.manifest import KernelUnit, Manifest

HIP_SUFFIXES = (".cu", ".hip")
DEFAULT_ARCHS = ("gfx906", "gfx908", "gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101", "gfx1200", "gfx1201")

# What torch's extension builder passes for HIP sources (COMMON_HIPCC_FLAGS): kernels
# written for it get half/bfloat16 arithmetic from c10, not from hip_fp16.h.
HIPCC_FLAGS = (
    "-O3",
    "-fno-gpu-rdc",
    "-DCUDA_HAS_FP16=1",
    "-D__HIP_NO_HALF_OPERATORS__=1",
    "-D__HIP_NO_HALF_CONVERSIONS__=1",
    "-DHIP_ENABLE_WARP_SYNC_BUILTINS=1",
)
# And for every source (COMMON_HIP_FLAGS): c10's headers pick their HIP paths by USE_ROCM.
HIP_DEFINITIONS = ("__HIP_PLATFORM_AMD__=1", "USE_ROCM=1")

HIPCC_MISSING = "hipcc not found on PATH or in $ROCM_PATH/bin (install ROCm/HIP, e.g. apt-get install hipcc)"


def hipcc_path() -> str | None:
    """hipcc from $ROCM_PATH/bin, else PATH."""
    rocm = os.environ.get("ROCM_PATH")
    if rocm and (Path(rocm) / "bin" / "hipcc").is_file():
        return str(Path(rocm) / "bin" / "hipcc")
    return shutil.which("hipcc")


def hip_env() -> dict[str, str]:
    # With nvcc on PATH, hipcc would otherwise pick the NVIDIA platform.
    return dict(os.environ, HIP_PLATFORM="amd")


def run_hip(command: list[str], timeout: int = 120) -> subprocess.CompletedProcess:
    """Run a HIP tool for the AMD platform, capturing its output."""
    return subprocess.run(command, capture_output=True, text=True, env=hip_env(), timeout=timeout, check=False)


def _query(command: list[str]) -> str:
    try:
        return run_hip(command).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


@functools.cache
def hipcc_id(hipcc: str) -> str:
    """`hipcc --version` in one line: the HIP version and the clang behind it."""
    lines = [line for line in _query([hipcc, "--version"]).splitlines() if "version" in line.lower()]
    return f"{hipcc}: {'; '.join(lines) or 'unknown version'}"


def hipcc_version(hipcc: str) -> tuple[int, int] | None:
    """(major, minor) of HIP ("HIP version: 5.2.21153-0"), which follows ROCm's."""
    m = re.search(r"HIP version: (\d+)\.(\d+)", hipcc_id(hipcc))
    return (int(m.group(1)), int(m.group(2))) if m else None


@functools.cache
def rocm_root(hipcc: str) -> str:
    """The ROCm install hipcc belongs to: its libraries and CMake package files."""
    for var in ("ROCM_PATH", "ROCM_HOME"):
        if os.environ.get(var):
            return os.environ[var]
    return _query([str(Path(hipcc).with_name("hipconfig")), "--rocmpath"]) or str(Path(hipcc).parent.parent)


@functools.cache
def hip_clang(hipcc: str) -> str | None:
    """The clang++ that hipcc drives: CMake's HIP language refuses the wrapper itself."""
    folder = os.environ.get("HIP_CLANG_PATH") or _query([str(Path(hipcc).with_name("hipconfig")), "--hipclangpath"])
    folder = Path(folder or Path(rocm_root(hipcc)) / "llvm" / "bin")
    # Debian names it clang++-<major>; ROCm clang++ (and amdclang++).
    names = ["clang++", "amdclang++"] + sorted(p.name for p in folder.glob("clang++-[0-9]*"))
    return next((str(folder / n) for n in names if (folder / n).is_file()), None)


def processor(target_id: str) -> str:
    """"gfx90a:xnack+" -> "gfx90a"."""
    return target_id.split(":")[0]


# clang names a target it does not know, or one whose device library is not installed.
_REJECTED = re.compile(
    r"invalid target ID '([^']+)'|cannot find ROCm device library for ([\w:+-]+)|unsupported \w+ gpu architecture: ([\w:+-]+)"
)


@functools.cache
def hipcc_architectures(hipcc: str, candidates: tuple[str, ...]) -> frozenset[str]:
    """The processors of `candidates` (target IDs) that this hipcc compiles device code for.

    Processors only: clang refuses gfx90a beside gfx90a:xnack+ in one command, and the
    features are checked when the unit compiles. A dry run reports every unknown processor
    at once, then (once those are gone) every one without a device library, so this takes
    two or three runs of ~0.1 s."""
    remaining = list(dict.fromkeys(processor(a) for a in candidates))
    while remaining:
        command = [hipcc, "-###", "-x", "hip", "--cuda-device-only", "-c", os.devnull]
        try:
            result = run_hip(command + [f"--offload-arch={a}" for a in remaining])
        except (OSError, subprocess.TimeoutExpired) as e:
            raise BuildError(f"{hipcc} could not be run ({e})") from None
        rejected = {next(g for g in m.groups() if g) for m in _REJECTED.finditer(result.stderr)}
        kept = [a for a in remaining if a not in rejected]
        if kept == remaining:
            if result.returncode != 0:
                error = next((line for line in result.stderr.splitlines() if "error" in line), result.stderr.strip())
                raise BuildError(f"{hipcc} cannot compile HIP device code: {error[:300]}")
            break
        remaining = kept
    return frozenset(remaining)


def supported_archs(manifest: Manifest, hipcc: str) -> frozenset[str]:
    """Which processors of the rocm units' archs and the defaults this hipcc compiles."""
    wanted = {a for u in manifest.units_for("rocm") for a in u.rocm_archs or ()} | set(DEFAULT_ARCHS)
    return hipcc_architectures(hipcc, tuple(sorted(wanted)))


def effective_archs(unit: KernelUnit, supported: frozenset[str], hipcc: str) -> tuple[str, ...]:
    """The unit's archs (or the defaults) that this hipcc compiles, in order."""
    wanted = unit.rocm_archs or DEFAULT_ARCHS
    kept = tuple(a for a in wanted if processor(a) in supported)
    if not kept:
        have = ", ".join(a for a in DEFAULT_ARCHS if a in supported) or "none"
        raise BuildError(
            f"[kernel.{unit.name}] rocm-archs {', '.join(wanted)}: this hipcc (HIP {_version_text(hipcc)}) "
            f"compiles none of them (of the default archs it compiles {have}); list archs it supports "
            "or install a newer ROCm"
        )
    return kept


def _version_text(hipcc: str) -> str:
    version = hipcc_version(hipcc)
    return f"{version[0]}.{version[1]}" if version else "of unknown version"


def require_hipcc() -> str:
    """hipcc's path, or a BuildError saying what to install."""
    hipcc = hipcc_path()
    if hipcc is None:
        raise BuildError(HIPCC_MISSING)
    return hipcc
