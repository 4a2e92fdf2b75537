"""docker/offline-base.sh's route per architecture, with stand-ins for debootstrap, docker and
the helper scripts on PATH (nothing is downloaded, imported or emulated): this machine's
architecture bootstraps in one stage; another one fetches with `debootstrap --foreign` and is
finished by docker/unpack-foreign.sh, never by dpkg's second stage under qemu (half an hour
for arm64 on 2 cores)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("flock") is None or shutil.which("tar") is None,
                                reason="needs flock and tar (util-linux, GNU tar)")

_STUBS = {
    # This machine is amd64 and root, whatever runs the test.
    "bin/dpkg": 'echo amd64\n',
    "bin/id": 'echo 0\n',
    "bin/chroot": 'echo "chroot $*" >>"$CALLS"\n',
    "bin/debootstrap": 'echo "debootstrap $*" >>"$CALLS"\n'
                       'shift $(($# - 2)); mkdir -p "$1/usr/bin" && echo python >"$1/usr/bin/python3"\n',
    # The engine: answers, has no image until one is imported, then reports its architecture.
    "bin/docker": '''echo "docker $*" >>"$CALLS"
case "$1 $2" in
  "info "*) exit 0 ;;
  "image inspect")
    [ -f "$STATE/imported" ] || exit 1
    [ "$3" = --format ] && cat "$STATE/imported"; exit 0 ;;
  "import "*)
    tar -t | sort >"$STATE/files"
    for a; do case "$a" in linux/*) echo "${a#linux/}" >"$STATE/imported" ;; esac; done ;;
esac
''',
    "docker/qemu-binfmt.sh": 'echo "qemu-binfmt $*" >>"$CALLS"\n',
    "docker/unpack-foreign.sh": 'echo "unpack-foreign $*" >>"$CALLS"\n',
}


def _run(tmp_path: Path, arch: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    for name, body in _STUBS.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
    shutil.copy(REPO / "docker" / "offline-base.sh", tmp_path / "docker" / "offline-base.sh")
    (tmp_path / "state").mkdir()
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "CALLS": str(tmp_path / "calls"),
           "STATE": str(tmp_path / "state"), "TMPDIR": str(tmp_path), "KBUILD_DEBIAN_MIRROR": "http://mirror.invalid/debian"}
    done = subprocess.run([str(tmp_path / "docker" / "offline-base.sh"), "bookworm", arch],
                          capture_output=True, text=True, env=env, check=False)
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    return done, calls


def test_another_architecture_is_unpacked_here_and_imported_as_its_platform(tmp_path):
    done, calls = _run(tmp_path, "arm64")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "kbuild-offline-base:bookworm-arm64"
    [bootstrap] = [c for c in calls if c.startswith("debootstrap ")]
    assert "--arch=arm64 --foreign" in bootstrap and "http://mirror.invalid/debian" in bootstrap
    assert "qemu-binfmt aarch64" in calls  # its binaries run through qemu in the image
    [unpack] = [c for c in calls if c.startswith("unpack-foreign ")]
    assert not [c for c in calls if c.startswith("chroot ")]  # no second stage under emulation
    [imported] = [c for c in calls if c.startswith("docker import ")]
    assert "--platform linux/arm64" in imported
    assert "./usr/bin/python3" in (tmp_path / "state" / "files").read_text().splitlines()


def test_this_machines_architecture_bootstraps_in_one_stage(tmp_path):
    done, calls = _run(tmp_path, "amd64")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "kbuild-offline-base:bookworm"
    [bootstrap] = [c for c in calls if c.startswith("debootstrap ")]
    assert "--foreign" not in bootstrap and "--arch" not in bootstrap
    assert not [c for c in calls if c.startswith(("unpack-foreign ", "qemu-binfmt ", "chroot "))]
