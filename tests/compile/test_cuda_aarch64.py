"""examples/swiglu's torch214-cxx11-cu130-aarch64-linux cross-built on this x86_64 machine
(issue 33): this machine's nvcc 13.0 with aarch64-linux-gnu-g++ as its host compiler,
linked against torch's aarch64 wheel and NVIDIA's aarch64 CUDA wheels
(kernel_builder/environments/cuda_cross.py), imported by the build's check in an emulated
aarch64 Python (torch's CUDA build imports without a GPU).

One build, for the three capabilities the aarch64 machines need: 9.0 (GH200), 10.0
(GB200) and 12.1 (GB10). The first run downloads torch's aarch64 wheel with its CUDA
libraries (about 3 GB) and compiles and imports under emulation: minutes."""

from __future__ import annotations

import json
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import copy_example, kbuild, made_once
from cuda_toolkit import embedded, needs_nvcc

VARIANT = "torch214-cxx11-cu130-aarch64-linux"
CAPABILITIES = ("9.0", "10.0", "12.1")

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.creates_env,
    pytest.mark.skipif(platform.machine() != "x86_64", reason="this is the cross route: an x86_64 host building for aarch64"),
    pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None or shutil.which("qemu-aarch64-static") is None,
                       reason="needs the cross compiler and qemu: apt-get install g++-aarch64-linux-gnu qemu-user-static"),
]


@pytest.fixture(scope="module")
def swiglu_aarch64(cu130_environment) -> tuple[Path, dict]:
    """The variant built once per test run, with its --json row (cu130_environment: the
    x86_64 CUDA torch whose triton wheel ships the cuobjdump these tests read SASS with)."""

    def make(folder: Path) -> None:
        root = copy_example("swiglu", folder)
        result = kbuild("build", str(root), "--variant", VARIANT, "--cuda-arch", ",".join(CAPABILITIES), "--json",
                        check=True)
        (folder / "result.json").write_text(result.stdout)

    folder = made_once("swiglu-cu130-aarch64", make)
    rows = json.loads((folder / "result.json").read_text())["jobs"]
    row = next(r for r in rows if r["variant"] == VARIANT)
    return folder / "swiglu" / "build" / VARIANT, row


def library(folder: Path) -> Path:
    metadata = json.loads((folder / "metadata.json").read_text())
    return folder / f"{metadata['id']}.abi3.so"


@needs_nvcc
def test_host_code_is_aarch64(swiglu_aarch64):
    folder, _ = swiglu_aarch64
    header = subprocess.run(["readelf", "-h", str(library(folder))], capture_output=True, text=True, check=True).stdout
    assert re.search(r"Machine:\s+AArch64", header), header
    needed = subprocess.run(["readelf", "-d", str(library(folder))], capture_output=True, text=True, check=True).stdout
    # The shared CUDA runtime torch loads, from NVIDIA's aarch64 wheel.
    assert "[libcudart.so.13]" in needed and "[libc10_cuda.so]" in needed, needed


@needs_nvcc
def test_exactly_the_requested_sass_and_no_ptx(swiglu_aarch64):
    folder, _ = swiglu_aarch64
    assert embedded(library(folder), "elf") == ["sm_100", "sm_121", "sm_90"]
    assert embedded(library(folder), "ptx") == []
    assert json.loads((folder / "metadata.json").read_text())["backend"]["archs"] == list(CAPABILITIES)


@needs_nvcc
def test_every_check_passes_and_the_import_ran_under_emulation(swiglu_aarch64):
    _, row = swiglu_aarch64
    checks = {c["check"]: c for c in row["checks"]}
    assert row["status"] == "built", row
    failed = {name: c for name, c in checks.items() if c["status"] not in ("ok", "skipped")}
    assert not failed, failed
    # The import check is never skipped on this route: it ran the aarch64 torch under qemu.
    assert checks["import"]["status"] == "ok" and "registers" in checks["import"]["detail"], checks["import"]
