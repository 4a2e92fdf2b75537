"""An emulated Python of another architecture, for the import check and `kbuild test` of
cross-built variants (kernel_builder.environments.cross_target): Debian bookworm's python3.11
for the target, run by qemu's user-mode emulator. Slow (torch's import takes tens of seconds
to minutes); `--no-import-check` skips it, and nothing else needs it.

The root is unpacked once per architecture into the store, beside the build environments:

    <root>/debian-bookworm-arm64/      python3.11 and the libraries it loads (glibc, libstdc++)
    <root>/debian-bookworm-arm64.json  the marker, written last

`debootstrap --foreign` fetches bookworm's minimal package set plus python3.11 and unpacks
what it needs; the remaining packages are unpacked with `dpkg-deb -x`, so no package script
ever runs under emulation (a full second stage takes many minutes). Each environment's
interpreter is a launcher script (`write_launcher`) that runs the root's python3.11 under
qemu with the root as its library prefix, as a virtual environment whose site-packages name
the target wheels' folders: it needs no binfmt_misc registration, and runs as it is inside
other processes and containers, where its sys.executable (the launcher) starts children.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from kernel_builder.environments.cross_target import CrossTarget, emulator_missing
from kernel_builder.errors import EnvironmentCreateError, KbuildError
from kernel_builder.file_lock import exclusive_lock

SUITE = "bookworm"
PYTHON = "3.11"  # bookworm's
MIRROR = "http://deb.debian.org/debian"
# python3.11, and GCC's OpenMP runtime: kbuild's CPU units link -fopenmp (NEEDED libgomp.so.1),
# which an aarch64 machine's gcc runtime provides; torch wheels that bundle only a renamed copy
# (torch 2.9's libgomp-<hash>.so) leave it to the system, as a real machine would.
PACKAGES = (f"python{PYTHON}", "libgomp1")
_DEBOOTSTRAP_TIMEOUT_S = 1800


def root_path(target: CrossTarget, store: Path) -> Path:
    """The root in `store` (the build environments' folder, kernel_builder.environments.store)."""
    return store / f"debian-{SUITE}-{target.debian_arch}"


def _marker(target: CrossTarget, store: Path) -> Path:
    return root_path(target, store).with_name(root_path(target, store).name + ".json")


def ready(target: CrossTarget, store: Path) -> bool:
    """Unpacked, with every package of PACKAGES (a root made before one was added is made again)."""
    try:
        unpacked = json.loads(_marker(target, store).read_text()).get("packages", [])
    except (OSError, ValueError, AttributeError):
        return False
    return set(PACKAGES) <= set(unpacked) and (root_path(target, store) / "usr" / "bin" / f"python{PYTHON}").is_file()


def missing_reason(target: CrossTarget, store: Path) -> str | None:
    """Why the emulated Python cannot be made or run here, with what to do, or None."""
    reason = emulator_missing(target)
    if reason or ready(target, store):
        return reason
    if shutil.which("debootstrap") is None:
        return f"no debootstrap to make the {target.arch} Python root: apt-get install debootstrap (or build with --no-import-check)"
    if os.geteuid() != 0:
        return (f"the {target.arch} Python root is unpacked by debootstrap, which needs root: run this once as root "
                "(or build with --no-import-check)")
    return None


def ensure(target: CrossTarget, store: Path, say: Callable[[str], None] = lambda line: None,
           progress: Callable[[str], None] | None = None) -> Path:
    """The root, unpacked on first use; KbuildError (one line, what to install) when it cannot be."""
    path = root_path(target, store)
    with exclusive_lock(path.with_name(path.name + ".lock")):
        if ready(target, store):
            return path
        reason = missing_reason(target, store)
        if reason:
            raise KbuildError(reason)
        say(f"unpacking Debian {SUITE}'s {target.debian_arch} python{PYTHON} for the emulated import check and tests "
            f"(first time only): debootstrap --foreign --arch={target.debian_arch} --variant=minbase — about 40 MB to download")
        shutil.rmtree(path, ignore_errors=True)
        log = path.with_name(path.name + ".log")
        command = ["debootstrap", "--foreign", f"--arch={target.debian_arch}", "--variant=minbase",
                   f"--include={','.join(PACKAGES)}", SUITE, str(path), MIRROR]
        if progress:
            progress(f"debootstrap {SUITE} {target.debian_arch}")
        try:
            with log.open("w") as out:
                out.write(f"$ {shlex.join(command)}\n")
                out.flush()
                done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=_DEBOOTSTRAP_TIMEOUT_S, check=False)
            if done.returncode != 0:
                raise EnvironmentCreateError(f"debootstrap of the {target.arch} Python root failed; log: {log}")
            _unpack_rest(path, log)
        except (OSError, subprocess.TimeoutExpired) as e:
            shutil.rmtree(path, ignore_errors=True)
            raise EnvironmentCreateError(f"cannot make the {target.arch} Python root: {e}; log: {log}") from None
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        _marker(target, store).write_text(json.dumps({"suite": SUITE, "arch": target.debian_arch, "packages": list(PACKAGES),
                                               "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}) + "\n")
    return path


def _unpack_rest(path: Path, log: Path) -> None:
    """Every package debootstrap fetched but left for its second stage, unpacked as files."""
    archives = path / "var" / "cache" / "apt" / "archives"
    with log.open("a") as out:
        for deb in sorted(archives.glob("*.deb")):
            done = subprocess.run(["dpkg-deb", "-x", str(deb), str(path)], stdout=out, stderr=subprocess.STDOUT, check=False)
            if done.returncode != 0:
                raise EnvironmentCreateError(f"dpkg-deb -x {deb.name} failed; log: {log}")
            deb.unlink()


# What an aarch64 kernel shows of its CPUs and qemu's user mode does not emulate: torch's CPU
# probes (cpuinfo, oneDNN's xbyak_aarch64) read them at import and crash on an x86 host's.
# With -L, qemu opens a path under the root first, so the root's files stand in for the host's.
# A Neoverse N1 (ARMv8.2, no SVE): kernels for what every aarch64 server has.
_CPU = ("BogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid "
        "asimdrdm lrcpc dcpop asimddp\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\n"
        "CPU part\t: 0xd0c\nCPU revision\t: 1\n")
_MIDR = "0x00000000413fd0c1\n"


def _host_cpus() -> int:
    """How many CPUs this machine's /sys says are possible (what torch counts under qemu)."""
    try:
        return int(Path("/sys/devices/system/cpu/possible").read_text().strip().split(",")[-1].split("-")[-1]) + 1
    except (OSError, ValueError):
        return os.cpu_count() or 1


def describe_cpus(root: Path) -> None:
    """The root's /proc/cpuinfo and /sys/devices/system/cpu (each CPU's MIDR_EL1, and which
    CPUs exist: that folder can replace the host's whole), for this machine's CPU count."""
    count = _host_cpus()
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "cpuinfo").write_text("".join(f"processor\t: {i}\n{_CPU}\n" for i in range(count)))
    cpus = root / "sys" / "devices" / "system" / "cpu"
    for i in range(count):
        folder = cpus / f"cpu{i}" / "regs" / "identification"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "midr_el1").write_text(_MIDR)
    for name in ("possible", "present", "online"):
        (cpus / name).write_text(f"0-{count - 1}\n" if count > 1 else "0\n")


def write_launcher(target: CrossTarget, root: Path, launcher: Path, site_dirs: list[Path]) -> None:
    """`launcher` (ENV/bin/python): a script running the root's python under qemu as a virtual
    environment (ENV/pyvenv.cfg) whose site-packages hold a .pth naming `site_dirs`. qemu's
    -0 gives Python the launcher as its argv[0], so it finds the venv and makes the launcher
    its sys.executable; -L resolves the dynamic loader and libraries inside the root."""
    env = launcher.parent.parent
    describe_cpus(root)  # this machine's CPU count: a store can move between machines
    qemu = shutil.which(target.qemu) or target.qemu
    python = root / "usr" / "bin" / f"python{PYTHON}"
    launcher.parent.mkdir(parents=True, exist_ok=True)
    (env / "pyvenv.cfg").write_text(f"home = {python.parent}\ninclude-system-site-packages = false\nversion = {PYTHON}\n")
    site = env / "lib" / f"python{PYTHON}" / "site-packages"
    site.mkdir(parents=True, exist_ok=True)
    (site / "_kbuild_target_wheels.pth").write_text("".join(f"{d}\n" for d in site_dirs))
    script = (
        "#!/bin/sh\n"
        f"# kbuild: {target.arch} Python {PYTHON} under qemu user-mode emulation (slow).\n"
        f"exec {shlex.quote(qemu)} -L {shlex.quote(str(root))} -0 \"$0\" {shlex.quote(str(python))} \"$@\"\n"
    )
    tmp = launcher.with_name(launcher.name + ".tmp")
    tmp.write_text(script)
    tmp.chmod(0o755)
    tmp.replace(launcher)
