"""Ctrl-C and SIGTERM during `kbuild build`, for real: the compilers stop, the command ends
with one line and 128 + the signal, and the previous variant folder is untouched."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO

VARIANT = "torch213-cxx11-cpu-x86_64-linux"


def _processes_under(folder: Path) -> list[str]:
    """Command lines of running processes that name `folder` (its compilers, CMake, Ninja)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if entry.name.isdigit() and str(folder) in line and "pytest" not in line:
            found.append(line)
    return found


@pytest.mark.e2e
@pytest.mark.parametrize("sent,exit_code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_build_says_so_and_keeps_the_previous_variant(tmp_path, sent, exit_code):
    kernel = tmp_path / "tiny"
    shutil.copytree(REPO / "tests" / "fixtures" / "tiny", kernel)
    previous = kernel / "build" / VARIANT
    previous.mkdir(parents=True)
    (previous / "metadata.json").write_text('{"previous": true}')  # not this build's: it compiles anew
    (previous / "_tiny_cpu_0000000.abi3.so").write_bytes(b"the previous build")
    before = {p.name: p.read_bytes() for p in previous.iterdir()}
    stderr = tmp_path / "stderr.txt"
    with open(stderr, "w") as err:
        build = subprocess.Popen(
            [sys.executable, "-m", "kernel_builder.cli", "build", str(kernel), "--variant", VARIANT, "--no-compiler-cache"],
            stdout=subprocess.PIPE, stderr=err, text=True, env=dict(os.environ),
            # As a terminal starts it: a suite run in the background (`cmd &` in a script) hands its
            # children SIGINT ignored, and kbuild rightly keeps ignoring it then.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        deadline = time.monotonic() + 300
        while f"{VARIANT} compile" not in stderr.read_text() and build.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert build.poll() is None, stderr.read_text()
        time.sleep(1)  # the compiler is running now
        build.send_signal(sent)
        stdout, _ = build.communicate(timeout=60)
    text = stderr.read_text()
    assert build.returncode == exit_code, text
    assert text.splitlines()[-1] == "kbuild: interrupted: 1 job cancelled, previous variants kept"
    assert "compile failed" not in text and "Traceback" not in text and stdout == ""
    assert {p.name: p.read_bytes() for p in previous.iterdir()} == before
    deadline = time.monotonic() + 10
    while _processes_under(kernel) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_under(kernel) == []  # no compiler left running
