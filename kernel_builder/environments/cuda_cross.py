"""CUDA variants for another architecture (aarch64-linux on x86_64): this machine's nvcc,
the target's CUDA headers and libraries from NVIDIA's wheels for that architecture.

nvcc cross-compiles by itself: with an aarch64 host compiler (CMake's
CMAKE_CUDA_HOST_COMPILER, nvcc's -ccbin) the device code is the same, and nvcc takes the
host-side headers and libraries from `<toolkit>/targets/aarch64-linux/` (CUDA 13's one
folder for every aarch64 Linux, the former sbsa-linux). An x86_64 toolkit has no such
folder, so kbuild composes a toolkit in the cross environment (cross_env):

    <env>/nvidia-wheels/         the target's CUDA wheels (one pip run: they share nvidia/)
        nvidia/cu13/include, lib     headers (nvcc's own among them), libcudart.so.13
    <env>/cuda-toolkit/
        bin/                     links to this machine's nvcc and its tools, and a copy of
                                 nvcc.profile: nvcc reads the profile, and finds the toolkit,
                                 beside the path it is run as
        nvvm                     link to this machine's nvvm (cicc, libdevice)
        targets/aarch64-linux    link to <env>/nvidia-wheels/nvidia/cu13

The wheels are the compiler wheels a native build installs (cuda_wheels.requirements: their
headers include nvcc's, e.g. fatbinary_section.h) and torch's own pin of NVIDIA's libraries
(`cuda-toolkit[cublas,...]`), whose headers ATen/cuda includes. Nothing here runs on the
target: the device code is the same nvcc's, so the SASS is what an x86_64 build embeds.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Callable

from packaging.requirements import Requirement

from kernel_builder.environments import cross_env, cuda_wheels
from kernel_builder.environments.cross_target import CrossTarget
from kernel_builder.environments.probe import BuildEnv
from kernel_builder.errors import BuildError
from kernel_builder.file_lock import exclusive_lock

# nvcc's folder under targets/ for a host compiler of each architecture.
TARGET_DIRS = {"aarch64": "aarch64-linux"}
WHEELS = "nvidia-wheels"
TOOLKIT = "cuda-toolkit"
READY = "cuda.json"  # the wheels' marker, written last
# torch's pin of NVIDIA's libraries (`cuda-toolkit[cublas,cudart,...]==13.0.3`): the headers torch's CUDA headers include.
_TORCH_CUDA_PIN = "cuda-toolkit"


def _home(env: BuildEnv) -> Path:
    return Path(env.python).parent.parent


def wheel_requirements(env: BuildEnv, cuda: tuple[int, int]) -> list[str]:
    """The target's CUDA wheels a cross build of `env`'s torch needs: the compiler wheels of
    CUDA `cuda` and torch's own pin of NVIDIA's libraries."""
    pinned = [r for r in cross_env.emulation_requirements(env) if Requirement(r).name == _TORCH_CUDA_PIN]
    return [*cuda_wheels.requirements(cuda), *pinned]


def target_home(env: BuildEnv, cuda: tuple[int, int]) -> Path:
    """The target's CUDA folder (include/, lib/) in the environment, whether installed or not."""
    return wheels_site(env) / "nvidia" / f"cu{cuda[0]}"


def host_toolkit(nvcc: str) -> Path | None:
    """The toolkit folder (with bin/nvcc.profile) of this machine's `nvcc`, also when `nvcc`
    is a wrapper script: nvcc's dry run names the folder it runs from (`_HERE_`)."""
    try:
        out = subprocess.run([nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
                             capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"^#\$ _HERE_=(.+)$", out.stdout + out.stderr, re.MULTILINE)
    here = Path(m.group(1).strip()) if m else Path(nvcc).resolve().parent
    return here.parent if (here / "nvcc.profile").is_file() else None


def describe_cost(env: BuildEnv | None, cuda: tuple[int, int]) -> str:
    """'about 1.5 GB, once' for the target's CUDA wheels, as far as pip's cached dry run knows."""
    if env is None or env.arch is None:
        return "downloaded once"
    if (_home(env) / READY).is_file():
        return "already downloaded"
    cost = cross_env.layer_cost(env, wheel_requirements(env, cuda), cached_only=True)
    return "downloaded once" if cost is None or cost.size_text() == "size unknown" else f"{cost.size_text()}, once"


def ensure_wheels(env: BuildEnv, cuda: tuple[int, int], say: Callable[[str], None] = lambda line: None,
                  progress: Callable[[str], None] | None = None) -> Path:
    """The target's CUDA folder, its wheels installed on first need (their download said first)."""
    home = _home(env)
    with exclusive_lock(home.with_name(f"{home.name}.cuda.lock")):
        if not (home / READY).is_file():
            requirements = wheel_requirements(env, cuda)
            cross_env.install_layer(env, WHEELS, requirements, f"{env.arch} CUDA {cuda[0]}.{cuda[1]} headers and libraries",
                                    say, progress, named=["nvidia-cuda-nvcc"])
            folder = target_home(env, cuda)
            if not (folder / "include" / "cuda_runtime.h").is_file():
                raise BuildError(f"{' '.join(requirements)} installed, but no nvidia/cu{cuda[0]}/include/cuda_runtime.h came with them")
            cuda_wheels.complete_layout(folder, cuda)  # lib/libcudart.so for the link
            (home / READY).write_text(json.dumps({"requirements": requirements}) + "\n")
    return target_home(env, cuda)


def compose(env: BuildEnv, cuda: tuple[int, int], target: CrossTarget, host_nvcc: str) -> str:
    """The composed toolkit's nvcc (made or refreshed): `host_nvcc`'s tools with the
    target's CUDA folder as targets/<arch>-linux. Raises BuildError when `host_nvcc` is a
    toolkit kbuild cannot read."""
    host = host_toolkit(host_nvcc)
    if host is None:
        raise BuildError(f"cannot find the toolkit folder of {host_nvcc} (no nvcc.profile beside the nvcc it runs); "
                         "set CUDA_HOME to the CUDA toolkit's folder")
    toolkit = _home(env) / TOOLKIT
    with exclusive_lock(_home(env).with_name(f"{_home(env).name}.cuda.lock")):
        links = {Path("nvvm"): host / "nvvm", Path("targets") / TARGET_DIRS[target.arch]: target_home(env, cuda)}
        links.update({Path("bin") / tool.name: tool for tool in (host / "bin").iterdir() if tool.name != "nvcc.profile"})
        for name, source in links.items():
            link = toolkit / name
            if link.is_symlink() and link.readlink() == source:
                continue
            link.parent.mkdir(parents=True, exist_ok=True)
            link.unlink(missing_ok=True)
            link.symlink_to(source)
        profile = toolkit / "bin" / "nvcc.profile"
        text = (host / "bin" / "nvcc.profile").read_text()
        if not profile.is_file() or profile.read_text() != text:
            profile.write_text(text)  # a copy: a link would make nvcc find the host's toolkit
    return str(toolkit / "bin" / "nvcc")


def wheels_site(env: BuildEnv) -> Path:
    """The folder the target's CUDA wheels are unpacked into (nvidia/cu13/ inside)."""
    return _home(env) / WHEELS


def host_nvcc_missing(cuda: tuple[int, int], target: CrossTarget, found: tuple[int, int] | None) -> str:
    """One line: this machine has no nvcc of CUDA `cuda` to cross-compile with."""
    have = f"nvcc here is CUDA {found[0]}.{found[1]}" if found else "no nvcc here"
    return (f"cross-building CUDA {cuda[0]}.{cuda[1]} for {target.arch} runs this machine's nvcc {cuda[0]}.{cuda[1]} "
            f"({have}): install the CUDA {cuda[0]}.{cuda[1]} toolkit, or set CUDA_HOME to it")

