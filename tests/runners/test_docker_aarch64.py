"""The docker runner's aarch64 route on a real engine: examples/relu's
torch214-cxx11-cpu-aarch64-linux built in a linux/arm64 image from the offline Debian base
of that platform (docker/offline-base.sh bookworm arm64), compiled natively inside the
container, which this x86_64 machine runs through qemu (binfmt_misc, F flag); the variant's
own import check runs in the container's aarch64 Python, and `kbuild check` passes it here.

Slow, being emulated (see tests/module_durations.json): one kernel, one variant, built once.
.ci/run registers qemu's handler; the arm64 base (a few minutes) and the test run only when asked
(KBUILD_TEST_AARCH64_DOCKER=1), as the image's pip installs PyPI's aarch64 torch (a CUDA build,
about 3 GB) under emulation: the figures are in docs/guides/aarch64.md (Docker), and
arm64_base's skip says them too."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import copy_example, docker_engine, kbuild, kbuild_in_process
from kernel_builder.runners import docker_images, docker_platform
from kernel_builder.variants import Variant

REPO = Path(__file__).resolve().parents[2]
ARM_CPU = "torch214-cxx11-cpu-aarch64-linux"
ARM64_BASE = "kbuild-offline-base:bookworm-arm64"  # what docker/offline-base.sh bookworm arm64 makes
# Measured on a 2-core x86_64 machine (docs/guides/aarch64.md, Docker).
COST = ("about 30 minutes in all: the arm64 base 2.5 minutes, the build image 16.5 (its pip installs PyPI's "
        "aarch64 torch, a CUDA build of about 3 GB, under qemu: 7.5 CPU minutes), the build with its import check 11")

pytestmark = [pytest.mark.e2e, pytest.mark.docker]


@pytest.fixture(scope="module")
def engine():
    return docker_engine()


@pytest.fixture(scope="module")
def arm64_base(engine) -> str:
    """$KBUILD_TEST_ARM64_BASE_IMAGE, else docker/offline-base.sh's linux/arm64 image, when asked
    for (KBUILD_TEST_AARCH64_DOCKER=1: .ci/run then starts making the base early, and the script
    waits for that run and finds its image) or when the costly part is done (the build image
    from that base is here). Not run unasked: the image build is the emulated pip of 3 GB."""
    problem = docker_platform.emulation_problem("linux/arm64")
    if problem:
        pytest.skip(problem)
    if os.environ.get("KBUILD_TEST_ARM64_BASE_IMAGE"):
        return os.environ["KBUILD_TEST_ARM64_BASE_IMAGE"]
    built = docker_images.image_for(Variant.parse(ARM_CPU), base_image=ARM64_BASE).tag
    if os.environ.get("KBUILD_TEST_AARCH64_DOCKER") != "1" and not _has_image(engine, built):
        pytest.skip(f"asked for only (KBUILD_TEST_AARCH64_DOCKER=1, or .ci/run with it): {COST}")
    done = subprocess.run([str(REPO / "docker" / "offline-base.sh"), "bookworm", "arm64"],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        pytest.skip(f"no linux/arm64 base image: docker/offline-base.sh bookworm arm64 failed: {why}")
    return done.stdout.strip().splitlines()[-1]


def _has_image(engine, tag: str) -> bool:
    from docker.errors import ImageNotFound

    try:
        engine.images.get(tag)
    except ImageNotFound:
        return False
    return True


@pytest.fixture(scope="module")
def relu_arm64(arm64_base, tmp_path_factory) -> tuple[Path, dict, str]:
    """examples/relu's aarch64 CPU variant, built once with the docker runner: (out, its row, stderr)."""
    folder = tmp_path_factory.mktemp("relu-arm64")
    kernel, out = copy_example("relu", folder), folder / "out"
    done = kbuild("build", str(kernel), "--runner", "docker", "--base-image", arm64_base,
                  "--variant", ARM_CPU, "--out", str(out), "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [row] = json.loads(done.stdout)["jobs"]
    return out, row, done.stderr


def test_relu_builds_in_an_arm64_container_and_passes_check(engine, arm64_base, relu_arm64):
    out, row, stderr = relu_arm64
    assert (row["variant"], row["status"]) == (ARM_CPU, "built"), row
    log = Path(row["log"]).read_text()
    assert log.startswith("$ docker run") and "--platform linux/arm64" in log.splitlines()[0]
    # Its image is the arm64 one of its own tag, built from the arm64 base.
    image = docker_images.image_for(Variant.parse(ARM_CPU), base_image=arm64_base)
    attrs = engine.images.get(image.tag).attrs
    assert attrs["Architecture"] == "arm64" and image.tag.startswith("kbuild-build-cpu:torch2.14-aarch64-")
    # Compiled for aarch64 (inside the container, natively), and imported there by its own check.
    from elftools.elf.elffile import ELFFile

    [library] = (out / ARM_CPU).glob("*.so")
    with library.open("rb") as f:
        assert ELFFile(f).header["e_machine"] == "EM_AARCH64"
    checks = {c["check"]: c["status"] for c in row["checks"]}
    assert checks.get("import") == "ok", row["checks"]
    # The same checks as an x86_64 variant: symbol versions, NEEDED, metadata.
    checked = kbuild("check", str(out), "--json")
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]
    [report] = json.loads(checked.stdout)
    results = {c["check"]: c["status"] for c in report["checks"]}
    assert results["abi"] in ("ok", "warning") and results["needed"] == "ok", report


def test_without_qemus_handler_an_arm64_build_is_one_line_with_the_fix(engine, tmp_path, monkeypatch):
    """No build starts: what is missing, and the command that fixes it."""
    if os.uname().machine == "aarch64":
        pytest.skip("an aarch64 machine runs linux/arm64 images natively")
    monkeypatch.setattr(docker_platform, "BINFMT_DIR", tmp_path / "binfmt_misc")  # nothing registered
    kernel = copy_example("relu", tmp_path)
    done = kbuild_in_process("build", str(kernel), "--runner", "docker", "--base-image", ARM64_BASE,
                             "--variant", ARM_CPU, "--out", str(tmp_path / "out"))
    assert done.returncode != 0
    [line] = done.stderr.strip().splitlines()
    assert "linux/arm64 images run here through qemu" in line and "docker/qemu-binfmt.sh aarch64" in line, line
    assert not (tmp_path / "out").exists()
