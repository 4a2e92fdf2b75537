"""The composed toolkit of a CUDA cross build (kernel_builder/environments/cuda_cross.py):
this machine's real nvcc, run through the composed folder, takes an aarch64 host
compiler's headers and libraries from the target's wheels. The full build is
tests/compile/test_cuda_aarch64.py (e2e)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from cuda_toolkit import NVCC, needs_nvcc
from kernel_builder.environments import cuda_cross
from kernel_builder.environments.cross_target import TARGETS
from kernel_builder.environments.probe import BuildEnv


def cross_env(folder: Path) -> BuildEnv:
    """A cross environment's record as cross_env writes it (its folder holds the wheels)."""
    (folder / "bin").mkdir(parents=True)
    return BuildEnv(python=str(folder / "bin" / "python"), python_version="3.11", python_include="", torch_version="2.14.1",
                    torch_dir=str(folder / "site" / "torch"), cxx11_abi=True, cuda="13.0", arch="aarch64")


@needs_nvcc
def test_the_composed_nvcc_reads_the_target_wheels_for_an_aarch64_host(tmp_path):
    env = cross_env(tmp_path / "torch214-cu130-aarch64")
    (cuda_cross.target_home(env, (13, 0)) / "include").mkdir(parents=True)
    nvcc = cuda_cross.compose(env, (13, 0), TARGETS["aarch64"], NVCC)
    assert cuda_cross.compose(env, (13, 0), TARGETS["aarch64"], NVCC) == nvcc  # made once, then unchanged
    toolkit = Path(nvcc).parent.parent
    assert (toolkit / "targets" / "aarch64-linux").resolve() == cuda_cross.target_home(env, (13, 0)).resolve()
    dry = subprocess.run([nvcc, "-ccbin", "aarch64-linux-gnu-g++", "--dryrun", "-x", "cu", "-c", "/dev/null",
                          "-o", "/dev/null"], capture_output=True, text=True, check=False)
    out = dry.stdout + dry.stderr
    # nvcc found the copied profile beside the composed bin/ and chose the aarch64 target folder.
    assert f"_HERE_={toolkit / 'bin'}" in out, out
    assert f'"-I{toolkit}/bin/../targets/aarch64-linux/include"' in out, out
    assert cuda_cross.host_toolkit(nvcc) == toolkit


def test_no_nvcc_of_the_release_says_what_to_install():
    line = cuda_cross.host_nvcc_missing((13, 0), TARGETS["aarch64"], (12, 8))
    assert line == ("cross-building CUDA 13.0 for aarch64 runs this machine's nvcc 13.0 (nvcc here is CUDA 12.8): "
                    "install the CUDA 13.0 toolkit, or set CUDA_HOME to it")
