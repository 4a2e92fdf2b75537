"""CUDA toolkits from NVIDIA's wheels (environments/cuda_wheels.py): which release gets
which wheels, and a real build of examples/swiglu's cu130 variant with the system nvcc
hidden, kbuild installing nvcc from wheels into the managed environment."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import copy_example, kbuild_in_process
from cuda_toolkit import CUDA_VARIANT, embedded, needs_nvcc
from kernel_builder.compile.backends import cuda
from kernel_builder.environments import cuda_wheels
from kernel_builder.errors import KbuildError


def test_requirements_pin_every_wheel_to_the_release():
    assert cuda_wheels.requirements((13, 0)) == [
        "nvidia-cuda-nvcc==13.0.*", "nvidia-cuda-runtime==13.0.*", "nvidia-cuda-cccl==13.0.*",
        "nvidia-cuda-crt==13.0.*", "nvidia-nvvm==13.0.*",
    ]
    assert cuda_wheels.requirements((13, 3))[0] == "nvidia-cuda-nvcc==13.3.*"
    with pytest.raises(KbuildError, match=r"no NVIDIA compiler wheels for CUDA 12.8 .*13.0-13.3\): install the CUDA 12.8 toolkit"):
        cuda_wheels.requirements((12, 8))


def test_toolkit_home_is_the_wheels_cuda_folder(tmp_path):
    assert cuda_wheels.toolkit_home(tmp_path, (13, 0)) is None
    nvcc = tmp_path / "nvidia" / "cu13" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("")
    assert cuda_wheels.toolkit_home(tmp_path, (13, 0)) == tmp_path / "nvidia" / "cu13"


def _without_system_nvcc(monkeypatch, tmp_path) -> dict:
    """PATH without any folder holding nvcc, no CUDA_HOME, no /usr/local/cuda fallback."""
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "nvcc").exists())
    monkeypatch.setattr(cuda, "STANDARD_CUDA_HOME", tmp_path / "no-cuda")
    for name in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", path)
    assert cuda.nvcc_path() is None
    return {"PATH": path}


@pytest.mark.e2e
@pytest.mark.creates_env
@needs_nvcc  # the system nvcc must be 13.0 for the suite; this test then hides it
def test_swiglu_cu130_builds_with_nvcc_from_wheels(tmp_path, monkeypatch):
    env = _without_system_nvcc(monkeypatch, tmp_path)
    root = copy_example("swiglu", tmp_path)
    done = kbuild_in_process("build", str(root), "--variant", CUDA_VARIANT, "--json", env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [job] = json.loads(done.stdout)["jobs"]
    assert job["status"] == "built", job

    folder = root / "build" / CUDA_VARIANT
    metadata = json.loads((folder / "metadata.json").read_text())
    library = folder / f"{metadata['id']}.abi3.so"
    assert embedded(library, "elf") == ["sm_80", "sm_90"]
    # CMake compiled with the wheel's nvcc, beside the environment's torch.
    cache_text = next(Path(job["log"]).parent.glob("build/CMakeCache.txt")).read_text()
    [compiler] = [line for line in cache_text.splitlines() if line.startswith("CMAKE_CUDA_COMPILER:")]
    assert compiler.endswith("site-packages/nvidia/cu13/bin/nvcc"), compiler
