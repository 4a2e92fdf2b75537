"""The platform a build image is for, and how this machine runs it: natively, or through
qemu's user-mode emulator.

An x86_64 variant builds in a `linux/amd64` image, an aarch64 one in a `linux/arm64` image.
On a machine of that architecture the image runs natively; elsewhere (an aarch64 variant on
an x86_64 workstation) the engine runs the image's binaries through qemu, which the Linux
kernel's binfmt_misc must know with the F (fix-binary) flag: the kernel then opens the
emulator once, on the host, so it runs inside containers whose filesystem has none.
docker/qemu-binfmt.sh registers it. The build inside compiles natively for the image's
architecture, only slower.

torch reads CPU registers at import (oneDNN's xbyak_aarch64: each CPU's MIDR_EL1 in /sys)
that qemu's user mode does not show, and crashes without them: an emulated linux/arm64
container gets the description the emulated Python of cross builds has
(environments.emulation_root.describe_cpus) mounted over /proc/cpuinfo and
/sys/devices/system/cpu. An image build cannot mount them, so the Dockerfiles check torch's
install there without importing it.

This is the one place that decides, from runtime.system.host_platform, whether an image
is emulated.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernel_builder.errors import KbuildError
from kernel_builder.runtime.system import host_platform

# The image platform of each variant arch that Linux containers build.
PLATFORMS = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}
# Each arch's ELF e_machine (little-endian, at byte 18 of the header), which a binfmt handler's magic matches.
_ELF_MACHINE = {"x86_64": 0x3E, "aarch64": 0xB7}
BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")


def image_platform(arch: str) -> str:
    """'linux/arm64' for aarch64: the platform of the images that build the arch's variants."""
    return PLATFORMS[arch]


def arch_of(platform: str) -> str:
    """'aarch64' for 'linux/arm64'."""
    return next(arch for arch, known in PLATFORMS.items() if known == platform)


def emulated(platform: str) -> bool:
    """Whether this machine runs `platform`'s images through an emulator (not its own arch)."""
    return platform != PLATFORMS.get(host_platform()[0])


def cpu_description(platform: str, folder: Path) -> list[tuple[Path, str]]:
    """For an emulated linux/arm64 container, the aarch64 CPU description written under
    `folder`, as (host path, container path) pairs to mount read-only; none otherwise."""
    if platform != PLATFORMS["aarch64"] or not emulated(platform):
        return []
    from kernel_builder.environments.emulation_root import describe_cpus

    describe_cpus(folder)
    return [(folder / "proc" / "cpuinfo", "/proc/cpuinfo"),
            (folder / "sys" / "devices" / "system" / "cpu", "/sys/devices/system/cpu")]


@dataclass(frozen=True)
class BinfmtHandler:
    """One binfmt_misc registration (a file under /proc/sys/fs/binfmt_misc)."""

    name: str
    enabled: bool
    interpreter: str
    flags: str
    offset: int
    magic: bytes

    def runs(self, arch: str) -> bool:
        """Whether it takes the 64-bit little-endian ELF executables of `arch`."""
        machine = _ELF_MACHINE.get(arch)
        header = self.magic if self.offset == 0 else b""
        return machine is not None and len(header) >= 20 and header[:5] == b"\x7fELF\x02" and header[18:20] == bytes([machine, 0])


def parse_binfmt_entry(name: str, text: str) -> BinfmtHandler | None:
    """A registration file's text ('enabled', 'interpreter ...', 'flags: POF', 'offset 0',
    'magic 7f454c46...'); None for one that matches by file extension, not magic."""
    fields: dict[str, str] = {}
    enabled = False
    for line in text.splitlines():
        if line.strip() == "enabled":
            enabled = True
        key, _, value = line.partition(" ")
        fields[key.rstrip(":")] = value.strip()
    if "magic" not in fields:
        return None
    try:
        magic = bytes.fromhex(fields["magic"])
        offset = int(fields.get("offset", "0"))
    except ValueError:
        return None
    return BinfmtHandler(name, enabled, fields.get("interpreter", ""), fields.get("flags", ""), offset, magic)


def binfmt_handlers(folder: Path | None = None) -> list[BinfmtHandler]:
    """This machine's binfmt_misc registrations (none when binfmt_misc is not mounted)."""
    handlers = []
    try:
        entries = sorted((folder or BINFMT_DIR).iterdir())
    except OSError:
        return []
    for entry in entries:
        if entry.name in ("register", "status"):
            continue
        try:
            handler = parse_binfmt_entry(entry.name, entry.read_text())
        except OSError:
            continue
        if handler is not None:
            handlers.append(handler)
    return handlers


def emulation_problem(platform: str, folder: Path | None = None) -> str | None:
    """Why this machine's Docker engine cannot run `platform`'s images, or None when it can:
    natively, or through an enabled binfmt handler with the F flag. The engine is taken to be
    this machine's (the handler lives in the kernel that runs the containers); a remote engine
    or a macOS engine's VM is not checked here."""
    if not emulated(platform) or host_platform()[1] != "linux":
        return None
    arch = arch_of(platform)
    found = [h for h in binfmt_handlers(folder) if h.runs(arch)]
    usable = [h for h in found if h.enabled and "F" in h.flags]
    if usable:
        return None
    here = host_platform()[0]
    if not found:
        state = f"this {here} machine has no binfmt handler for {arch} binaries"
    elif not any(h.enabled for h in found):
        state = f"its binfmt handler for {arch} binaries ({found[0].name}) is disabled"
    else:
        state = f"its binfmt handler for {arch} binaries ({found[0].name}) lacks the F flag, so containers cannot reach the emulator"
    return (f"{platform} images run here through qemu, but {state}: as root, apt-get install qemu-user-static "
            f"and run docker/qemu-binfmt.sh {arch} from kbuild's repository (it registers qemu with the F flag), "
            f"or build on an {arch} machine")


def require_runnable(platform: str) -> None:
    """A KbuildError (one line, with the fix) when this machine cannot run `platform`'s images."""
    problem = emulation_problem(platform)
    if problem:
        raise KbuildError(problem)
