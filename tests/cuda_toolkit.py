"""The CUDA toolkit as the CUDA build tests find it: nvcc (13.0, what torch 2.14.1+cu130
pins), the variant those builds make, and cuobjdump to read their SASS and PTX back.
Shared by tests/compile/test_cuda.py, tests/checks/ and tests/examples/."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from kernel_builder.compile.backends.cuda import nvcc_path, nvcc_version

NVCC = nvcc_path()
_without_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed (the CUDA toolkit is needed to compile CUDA)")
CUDA_VARIANT = "torch214-cxx11-cu130-x86_64-linux"
if NVCC is not None and nvcc_version(NVCC) is not None and nvcc_version(NVCC)[0] != 13:
    _without_nvcc = pytest.mark.skip(reason=f"these builds pin CUDA 13.0 (torch 2.14.1+cu130); nvcc here is {nvcc_version(NVCC)}")


def needs_nvcc(test):
    """Marks a test `cuda` (pytest -m cuda selects them) and skips it without nvcc 13.0."""
    return pytest.mark.cuda(_without_nvcc(test))


def cuobjdump() -> str | None:
    """The system CUDA lacks cuobjdump; the triton wheel beside a CUDA torch ships one."""
    from kernel_builder.environments.store import EnvSpec, find_env

    env = find_env(EnvSpec((2, 14), "cu130"))
    if env is not None:
        bundled = Path(env.torch_dir).parent / "triton" / "backends" / "nvidia" / "bin" / "cuobjdump"
        if bundled.exists():
            return str(bundled)
    return shutil.which("cuobjdump")


def embedded(library: Path, what: str) -> list[str]:
    """`cuobjdump --list-elf|--list-ptx`: the architectures of the embedded SASS or PTX."""
    tool = cuobjdump()
    assert tool, "cuobjdump not found in the CUDA torch environment (triton) nor on PATH"
    out = subprocess.run([tool, f"--list-{what}", str(library)], capture_output=True, text=True, check=False)
    # cuobjdump names both by the SASS arch ("x.1.sm_80.cubin", "x.1.sm_80.ptx").
    archs = re.findall(r"\.sm_(\d+a?)\.(?:cubin|ptx)", out.stdout)
    return sorted({("sm_" if what == "elf" else "compute_") + a for a in archs})


def hidden_toolkit(command: list[str]) -> list[str]:
    """`command` run where kbuild finds no nvcc (MACHINE.md): a private mount namespace with
    an empty tmpfs over the toolkit's folder (/usr/local/cuda's target) and /dev/null over
    the nvcc on PATH, so neither PATH nor the standard folder has one (run it without
    CUDA_HOME and CUDA_PATH). Needs root."""
    from kernel_builder.compile.backends.cuda import STANDARD_CUDA_HOME

    masks = []
    home = STANDARD_CUDA_HOME.resolve()
    if home.is_dir():
        masks.append(f"mount -t tmpfs tmpfs {shlex.quote(str(home))}")
    on_path = shutil.which("nvcc")
    if on_path and not Path(on_path).resolve().is_relative_to(home):  # e.g. a wrapper in /usr/local/bin
        masks.append(f"mount --bind /dev/null {shlex.quote(on_path)}")
    script = " && ".join([*masks, 'exec "$@"'])
    return ["unshare", "-m", "sh", "-c", script, "sh", *command]


def _can_hide() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(hidden_toolkit(["true"]), capture_output=True, check=False)
    return probe.returncode == 0


needs_hiding = pytest.mark.skipif(not _can_hide(), reason="cannot hide the CUDA toolkit (unshare -m and mount need root)")
