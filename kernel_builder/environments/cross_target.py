"""Building for another CPU architecture than this machine's: which route a Linux variant
takes, and the tools each route needs.

- native: the variant's platform is this machine's (an aarch64 variant on an aarch64 host).
- cross: an aarch64-linux variant on an x86_64-linux host. The Debian cross compiler
  (`aarch64-linux-gnu-g++`) compiles against torch's aarch64 wheel (fetched for the target
  platform, kernel_builder.environments.cross_env), driven by a CMake toolchain file; the
  import check and `kbuild test` run in an aarch64 Python under qemu's user-mode emulation
  (kernel_builder.environments.emulation_root), which is slow, and `--no-import-check` skips.

Every fact about a target architecture is one CrossTarget; the route is keyed on
runtime.system.host_platform, so the same variant builds natively on its own machine.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from kernel_builder.runtime.system import host_platform


class Route(str, Enum):
    NATIVE = "native"
    CROSS = "cross"  # cross compiler; import check and tests under emulation


@dataclass(frozen=True)
class CrossTarget:
    """One Linux architecture kbuild can build for from another machine."""

    arch: str  # the variant's spelling: aarch64
    triplet: str  # the GNU tools' prefix: aarch64-linux-gnu
    debian_arch: str  # Debian's name, for debootstrap: arm64
    qemu: str  # the user-mode emulator (qemu-user-static)
    manylinux: tuple[int, int]  # the newest manylinux tag its wheels are fetched for (PEP 600)
    oldest_manylinux: tuple[int, int]  # glibc's first release on the architecture
    hosts: tuple[str, ...]  # the machines that cross-build for it

    @property
    def compiler(self) -> str:
        return f"{self.triplet}-g++"

    @property
    def c_compiler(self) -> str:
        return f"{self.triplet}-gcc"

    @property
    def compiler_package(self) -> str:
        return f"g++-{self.triplet}"

    @property
    def emulator_package(self) -> str:
        return "qemu-user-static"

    def pip_platforms(self) -> tuple[str, ...]:
        """pip's --platform values for wheels that load on manylinux_2_28 (pip matches a
        --platform tag exactly, so every older glibc tag is named, then manylinux2014)."""
        major, newest = self.manylinux
        tags = [f"manylinux_{major}_{minor}_{self.arch}" for minor in range(newest, self.oldest_manylinux[1] - 1, -1)]
        return (*tags, f"manylinux2014_{self.arch}")

    def apt_command(self, packages: tuple[str, ...] | None = None) -> str:
        return f"apt-get install {' '.join(packages or (self.compiler_package, self.emulator_package))}"


TARGETS = {
    "aarch64": CrossTarget(
        arch="aarch64", triplet="aarch64-linux-gnu", debian_arch="arm64", qemu="qemu-aarch64-static",
        manylinux=(2, 28), oldest_manylinux=(2, 17), hosts=("x86_64",),
    ),
}


def route(platform: str | None) -> Route | None:
    """How this machine builds for `platform` (`aarch64-linux`): natively, by cross
    compilation, or not at all (None). A noarch variant (platform None) is native."""
    arch, os_ = host_platform()
    if platform is None or platform == f"{arch}-{os_}":
        return Route.NATIVE
    target_arch, _, target_os = platform.partition("-")
    target = TARGETS.get(target_arch)
    if target is not None and target_os == "linux" == os_ and arch in target.hosts:
        return Route.CROSS
    return None


def target_for(platform: str | None) -> CrossTarget | None:
    """The CrossTarget a variant of `platform` is cross-built for here, or None (native, or no route)."""
    if route(platform) is not Route.CROSS:
        return None
    return TARGETS[platform.partition("-")[0]]  # type: ignore[union-attr]


def cross_compiler(target: CrossTarget) -> str | None:
    return shutil.which(target.compiler)


def emulator(target: CrossTarget) -> str | None:
    return shutil.which(target.qemu)


def compiler_missing(target: CrossTarget) -> str | None:
    """Why the cross compiler cannot be used, with the command that installs it, or None."""
    if cross_compiler(target):
        return None
    return f"no {target.arch} cross compiler ({target.compiler}): {target.apt_command()}"


def emulator_missing(target: CrossTarget) -> str | None:
    """Why the emulated import check and tests cannot run, with the install command, or None."""
    if emulator(target):
        return None
    return (f"no {target.arch} emulator ({target.qemu}) for the import check and tests: "
            f"{target.apt_command()} (or build with --no-import-check)")


def describe_route(platform: str | None) -> str:
    """One phrase for `kbuild plan` and `kbuild doctor`: how a variant of `platform` builds here."""
    found = route(platform)
    if found is Route.NATIVE:
        return "native"
    target = target_for(platform)
    if target is None:
        return "no route from this machine"
    return f"cross ({target.compiler}; import check and tests under {target.qemu} emulation, slow)"


def toolchain_file(target: CrossTarget, folder: Path) -> Path:
    """The CMake toolchain file of a cross build, written (once, unchanged afterwards, so a
    rebuild does not reconfigure) into `folder`: the target system and its compilers; the
    libraries and headers come from the torch wheel's folders, given by full path."""
    path = folder / f"toolchain-{target.arch}-linux.cmake"
    text = "\n".join([
        "# Generated by kbuild (kernel_builder/environments/cross_target.py): cross compilation",
        f"# for {target.arch}-linux with the GNU cross tools.",
        "set(CMAKE_SYSTEM_NAME Linux)",
        f"set(CMAKE_SYSTEM_PROCESSOR {target.arch})",
        f"set(CMAKE_C_COMPILER {shutil.which(target.c_compiler) or target.c_compiler})",
        f"set(CMAKE_CXX_COMPILER {cross_compiler(target) or target.compiler})",
        "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)",
        "",
    ])
    folder.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path
