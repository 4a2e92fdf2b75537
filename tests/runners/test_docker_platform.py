"""Which platform a build image is for, and whether this machine runs it natively or through
qemu: read from binfmt_misc registration files (written here in the kernel's own format)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel_builder.errors import KbuildError
from kernel_builder.runners import docker_images, docker_platform
from kernel_builder.runners.docker_images import image_for
from kernel_builder.runners.docker_platform import emulation_problem, parse_binfmt_entry
from kernel_builder.variants import Variant

ARM_CPU = "torch214-cxx11-cpu-aarch64-linux"
# What the kernel shows for Debian's qemu-user-static registrations.
AARCH64_ENTRY = """enabled
interpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P
flags: POF
offset 0
magic 7f454c460201010000000000000000000200b700
mask ffffffffffffff00fffffffffffffffffeffffff
"""
X86_64_ENTRY = """enabled
interpreter /usr/libexec/qemu-binfmt/x86_64-binfmt-P
flags: POF
offset 0
magic 7f454c4602010100000000000000000002003e00
mask fffffffffffefe00fffffffffffffffffeffffff
"""
JAR_ENTRY = """enabled
interpreter /usr/bin/jexec
flags:
extension .jar
"""


def registrations(folder: Path, **entries: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "register").write_text("")
    (folder / "status").write_text("enabled\n")
    for name, text in entries.items():
        (folder / name.replace("_", "-")).write_text(text)
    return folder


@pytest.fixture
def on(monkeypatch):
    """Pretend this machine is ARCH-linux."""
    def host(arch: str) -> None:
        monkeypatch.setattr(docker_platform, "host_platform", lambda: (arch, "linux"))
    return host


def test_a_registration_says_which_arch_it_runs():
    aarch64 = parse_binfmt_entry("qemu-aarch64", AARCH64_ENTRY)
    assert aarch64 is not None and aarch64.enabled and "F" in aarch64.flags
    assert aarch64.runs("aarch64") and not aarch64.runs("x86_64")
    assert parse_binfmt_entry("qemu-x86_64", X86_64_ENTRY).runs("x86_64")
    assert parse_binfmt_entry("jar", JAR_ENTRY) is None  # matched by extension, not by an ELF header


def test_images_of_this_machines_arch_run_natively(on, tmp_path):
    on("x86_64")
    assert not docker_platform.emulated("linux/amd64") and docker_platform.emulated("linux/arm64")
    assert emulation_problem("linux/amd64", tmp_path / "none") is None
    on("aarch64")
    assert not docker_platform.emulated("linux/arm64")
    assert emulation_problem("linux/arm64", tmp_path / "none") is None


def test_an_emulated_platform_needs_a_handler_with_the_f_flag(on, tmp_path):
    on("x86_64")
    assert emulation_problem("linux/arm64", registrations(tmp_path / "ok", qemu_aarch64=AARCH64_ENTRY)) is None

    missing = emulation_problem("linux/arm64", registrations(tmp_path / "missing", jar=JAR_ENTRY))
    assert "no binfmt handler for aarch64" in missing and "docker/qemu-binfmt.sh aarch64" in missing
    assert "apt-get install qemu-user-static" in missing and "\n" not in missing
    # Unmounted binfmt_misc reads as no handler.
    assert "no binfmt handler" in emulation_problem("linux/arm64", tmp_path / "not-mounted")

    without_f = AARCH64_ENTRY.replace("flags: POF", "flags: P")
    assert "lacks the F flag" in emulation_problem("linux/arm64", registrations(tmp_path / "no-f", qemu_aarch64=without_f))
    disabled = AARCH64_ENTRY.replace("enabled", "disabled")
    assert "is disabled" in emulation_problem("linux/arm64", registrations(tmp_path / "off", qemu_aarch64=disabled))

    on("aarch64")  # the other way round: x86_64 images on an arm64 machine
    assert "no binfmt handler for x86_64" in emulation_problem("linux/amd64", registrations(tmp_path / "arm", qemu_aarch64=AARCH64_ENTRY))
    assert emulation_problem("linux/amd64", registrations(tmp_path / "arm-ok", qemu_x86_64=X86_64_ENTRY)) is None


def test_aarch64_variants_get_arm64_images_of_their_own_tag():
    arm = image_for(Variant.parse(ARM_CPU), base_image="kbuild-offline-base:bookworm-arm64")
    x86 = image_for(Variant.parse(ARM_CPU.replace("aarch64", "x86_64")), base_image="kbuild-offline-base:bookworm-arm64")
    assert arm.platform == "linux/arm64" and x86.platform == "linux/amd64"
    assert arm.tag.startswith("kbuild-build-cpu:torch2.14-aarch64-") and arm.tag != x86.tag
    assert arm.build_args["BASE_IMAGE"] == "kbuild-offline-base:bookworm-arm64"  # --base-image as for any variant
    assert image_for(Variant.parse(ARM_CPU)).build_args["BASE_IMAGE"] == "quay.io/pypa/manylinux_2_28_aarch64"


class LocalImage:
    def __init__(self, architecture: str):
        self.id = f"sha256:{architecture}"
        self.attrs = {"Architecture": architecture}
        self.labels = {}


class Engine:
    """An engine holding one local image per tag (docker.images.get's contract)."""

    def __init__(self, **images: LocalImage):
        self.stored = images
        self.images = self

    def get(self, tag: str):
        from docker.errors import ImageNotFound

        if tag not in self.stored:
            raise ImageNotFound(tag)
        return self.stored[tag]


def test_building_an_arm64_image_without_qemu_is_one_line_with_the_fix(on, tmp_path, monkeypatch):
    pytest.importorskip("docker.errors", reason="the Docker SDK (kbuild[docker]) is not installed")
    on("x86_64")
    monkeypatch.setattr(docker_platform, "BINFMT_DIR", registrations(tmp_path / "binfmt", jar=JAR_ENTRY))
    engine = Engine(base=LocalImage("arm64"))
    with pytest.raises(KbuildError, match=r"linux/arm64 images run here through qemu, but .* docker/qemu-binfmt.sh aarch64"):
        docker_images.build_images([Variant.parse(ARM_CPU)], engine, base_image="base")


def test_a_base_of_another_platform_is_refused_before_building(on, tmp_path, monkeypatch):
    pytest.importorskip("docker.errors", reason="the Docker SDK (kbuild[docker]) is not installed")
    on("x86_64")
    monkeypatch.setattr(docker_platform, "BINFMT_DIR", registrations(tmp_path / "binfmt", qemu_aarch64=AARCH64_ENTRY))
    engine = Engine(base=LocalImage("amd64"))
    with pytest.raises(KbuildError, match=r"the base image base is linux/amd64, .* \(docker/offline-base.sh bookworm arm64 makes one\)"):
        docker_images.build_images([Variant.parse(ARM_CPU)], engine, base_image="base")


def test_build_images_plans_arm64_images_for_an_aarch64_selection():
    from conftest import kbuild_in_process

    done = kbuild_in_process("docker", "build-images", "--dry-run", "--base-image", "kbuild-offline-base:bookworm-arm64",
                             "torch=2.14 backend=cpu os=linux arch=aarch64")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "kbuild-build-cpu:torch2.14-aarch64-" in done.stdout and "linux/arm64" in done.stdout, done.stdout


def test_an_emulated_arm64_container_gets_the_cpu_registers_torch_reads(on, tmp_path):
    """qemu's user mode shows an x86_64 host's CPUs, and torch's import crashes on them in an
    aarch64 container ("Can't open MIDR_EL1 sysfs entry"): the container gets an aarch64 CPU
    description mounted read-only instead; a native one gets nothing."""
    from kernel_builder.runners.docker import KBUILD_PACKAGE_DIR, container_spec

    on("x86_64")
    image = image_for(Variant.parse(ARM_CPU), base_image="kbuild-offline-base:bookworm-arm64")
    kernel = tmp_path / "kernel"
    kernel.mkdir()
    spec = container_spec(ARM_CPU, kernel, tmp_path / "out", None, KBUILD_PACKAGE_DIR, image, uid=1000, gid=1000,
                          max_jobs=None, nvcc_threads=None, kbuild_cache_dir=tmp_path / "job")
    mounts = {m.target: m for m in spec.mounts}
    cpuinfo, cpus = mounts["/proc/cpuinfo"], mounts["/sys/devices/system/cpu"]
    assert cpuinfo.read_only and cpus.read_only
    assert "CPU implementer\t: 0x41" in cpuinfo.source.read_text()
    assert (cpus.source / "cpu0" / "regs" / "identification" / "midr_el1").read_text() == "0x00000000413fd0c1\n"
    count = cpuinfo.source.read_text().count("processor\t:")
    assert (cpus.source / "possible").read_text() == (f"0-{count - 1}\n" if count > 1 else "0\n")
    assert f"--mount type=bind,source={cpuinfo.source},target=/proc/cpuinfo,readonly" in " ".join(spec.to_cli())

    on("aarch64")  # natively, the kernel's own
    native = container_spec(ARM_CPU, kernel, tmp_path / "out", None, KBUILD_PACKAGE_DIR, image, uid=1000, gid=1000,
                            max_jobs=None, nvcc_threads=None, kbuild_cache_dir=tmp_path / "job-native")
    assert not [m for m in native.mounts if m.target.startswith(("/proc", "/sys"))]
