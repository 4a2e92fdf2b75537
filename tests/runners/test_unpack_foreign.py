"""docker/unpack-foreign.sh, which finishes a `debootstrap --foreign` root for
docker/offline-base.sh's linux/arm64 base without dpkg's second stage under qemu: on a
made-up root of two tiny packages, so nothing is downloaded or emulated."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "docker" / "unpack-foreign.sh"

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb (Debian's dpkg) is not installed")


def _deb(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    """A .deb of `name` shipping `files` (path in the root: text)."""
    tree = tmp_path / f"pkg-{name}"
    for path, text in files.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text(text)
    (tree / "DEBIAN").mkdir()
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: 1\nArchitecture: arm64\nMaintainer: kbuild <kbuild@example.org>\nDescription: {name}\n")
    out = tmp_path / f"{name}.deb"
    subprocess.run(["dpkg-deb", "--build", "-Zgzip", "--root-owner-group", str(tree), str(out)],
                   check=True, capture_output=True)
    return out


def _foreign_root(tmp_path: Path) -> Path:
    """What the first stage leaves: merged /usr, 'toolchain' fetched for the second stage,
    'extracted' fetched and already extracted (a required package), /proc a link."""
    root = tmp_path / "root"
    archives = root / "var" / "cache" / "apt" / "archives"
    archives.mkdir(parents=True)
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "bin").symlink_to("usr/bin")
    (root / "proc").symlink_to("/proc")
    toolchain = _deb(tmp_path, "toolchain", {
        "bin/gcc": "gcc\n",  # shipped under /bin, as bookworm's packages still do
        "usr/bin/g++": "g++\n",
        "usr/share/base-passwd/passwd.master": "root:*:0:0:root:/root:/bin/bash\n",
        "usr/share/base-passwd/group.master": "root:*:0:\n",
        "usr/share/ca-certificates/mozilla/B.crt": "cert B\n",
        "usr/share/ca-certificates/mozilla/A.crt": "cert A\n",
    })
    extracted = _deb(tmp_path, "extracted", {"usr/bin/extracted-again": "no\n"})
    for deb in (toolchain, extracted):
        shutil.copy(deb, archives / deb.name)
    (root / "debootstrap").mkdir()
    (root / "debootstrap" / "base").write_text("toolchain \n")
    (root / "debootstrap" / "debpaths").write_text(
        "extracted /var/cache/apt/archives/extracted.deb\ntoolchain /var/cache/apt/archives/toolchain.deb\n")
    return root


def test_unpacks_the_second_stages_packages_and_does_what_their_scripts_would(tmp_path):
    root = _foreign_root(tmp_path)
    done = subprocess.run([str(SCRIPT), str(root)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    # Unpacked through the merged-/usr link, which stays a link (dpkg-deb -x would make /bin a folder).
    assert (root / "bin").is_symlink() and (root / "usr" / "bin" / "gcc").read_text() == "gcc\n"
    assert not (root / "usr" / "bin" / "extracted-again").exists()  # the first stage's, left alone
    # The alternatives whose targets are there, as update-alternatives links them; none dangling.
    assert os.readlink(root / "usr" / "bin" / "cc") == "/etc/alternatives/cc"
    assert os.readlink(root / "etc" / "alternatives" / "cc") == "/usr/bin/gcc"
    assert os.readlink(root / "etc" / "alternatives" / "c++") == "/usr/bin/g++"
    assert not (root / "usr" / "bin" / "awk").is_symlink()  # no mawk here
    # Users and groups, and the CA bundle of every certificate, in ca-certificates' order.
    assert (root / "etc" / "passwd").read_text() == "root:*:0:0:root:/root:/bin/bash\n"
    assert (root / "etc" / "group").read_text() == "root:*:0:\n"
    assert (root / "etc" / "ca-certificates.conf").read_text() == "mozilla/A.crt\nmozilla/B.crt\n"
    assert (root / "etc" / "ssl" / "certs" / "ca-certificates.crt").read_text() == "cert A\ncert B\n"
    # No debootstrap leftovers in the image: its files, the .debs, /proc linked to this machine's.
    assert not (root / "debootstrap").exists()
    assert not list((root / "var" / "cache" / "apt" / "archives").glob("*.deb"))
    assert (root / "proc").is_dir() and not (root / "proc").is_symlink()


def test_a_root_debootstrap_did_not_make_is_one_line(tmp_path):
    done = subprocess.run([str(SCRIPT), str(tmp_path)], capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert done.stderr.strip() == f"unpack-foreign.sh: {tmp_path} is not a debootstrap --foreign root (no debootstrap/base and debpaths)"


def test_a_package_the_first_stage_did_not_fetch_is_one_line(tmp_path):
    root = _foreign_root(tmp_path)
    (root / "debootstrap" / "base").write_text("toolchain missing\n")
    done = subprocess.run([str(SCRIPT), str(root)], capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert done.stderr.strip() == "unpack-foreign.sh: debootstrap fetched no .deb for missing"
