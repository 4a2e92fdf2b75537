"""The import check's interpreter, started while a build compiles (kernel_builder.checks.import_process):
it imports torch ahead, then loads the one folder it is given; unused, it leaves nothing behind."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest
from pathlib import Path

from conftest import optional_module
from kernel_builder.checks.import_process import ImportProcess
from kernel_builder.checks.variant_checks import OK, check_import
from kernel_builder.variants import Variant

VARIANT = "torch213-cxx11-cpu-x86_64-linux"


def test_closed_without_a_request_it_ends_and_removes_its_folder():
    process = ImportProcess(sys.executable)
    folder = process.folder
    assert (folder / "kernel_builder").is_symlink()
    process.close()
    assert not folder.exists()
    assert process._process.returncode is not None


def test_its_folder_is_private_and_a_killed_kbuilds_folder_goes_with_the_next_check():
    """kbuild SIGKILLed while a check waits (no cleanup runs) leaves its folder; the next
    check removes it, and never a folder whose kbuild still runs (issue 30)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom kernel_builder.checks.import_process import ImportProcess\n"
         "p = ImportProcess(sys.executable)\nprint(p.folder, flush=True)\ntime.sleep(300)\n"],
        stdout=subprocess.PIPE, text=True,
    )
    live = None
    try:
        left = Path(holder.stdout.readline().strip())
        with ImportProcess(sys.executable) as other:
            assert left.is_dir(), "a running kbuild's folder was removed"
            live = other.folder
            info = os.stat(live.parent)
            assert info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700
            assert live.parent.name == "check" and live.parent.parent.name == f"kbuild-{os.getuid()}"
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        assert left.is_dir()
        ImportProcess(sys.executable).close()
        assert not left.exists() and not Path(f"{left}.lock").exists()
        assert not live.exists()
    finally:
        holder.kill()
        holder.wait()


def test_the_callers_working_folder_is_not_on_its_path(tmp_path, monkeypatch):
    # The script's first import is json: a json.py in the working folder would run instead.
    optional_module("torch")
    (tmp_path / "json.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    with ImportProcess(sys.executable) as process:
        done = process.run(tmp_path / "no-variant", "cpu", timeout_s=300)
    assert not (tmp_path / "ran").exists(), "the json.py in the working folder ran"
    assert done.returncode != 0 and "no-variant" in done.stderr, done.stderr  # it did get to load_local


@pytest.mark.e2e
def test_a_process_started_ahead_has_torch_imported_and_loads_the_variant(relu_cpu):
    folder = relu_cpu / "build" / VARIANT  # conftest.py: built once per session, only read here
    with ImportProcess(sys.executable) as process:
        time.sleep(0.2)
        assert process._process.poll() is None, "it waits for its request"
        done = process.run(folder, "cpu", timeout_s=300)
    assert done.returncode == 0, done.stderr
    ops = json.loads(done.stdout.strip().splitlines()[-1])["ops"]
    assert any(op.endswith("::relu") for op in ops), ops


@pytest.mark.e2e
def test_the_check_uses_a_prepared_process_of_its_interpreter_only(relu_cpu):
    folder = relu_cpu / "build" / VARIANT
    variant = Variant.parse(VARIANT)
    with ImportProcess(sys.executable) as prepared:
        result = check_import(folder, variant, sys.executable, prepared)
        assert result.status == OK and "registers 1 op: relu" in result.detail, result
        assert prepared._process.returncode == 0, "the prepared process ran the check"
    with ImportProcess("/bin/false") as other:  # another interpreter: not used, left to its owner
        result = check_import(folder, variant, sys.executable, other)
        assert result.status == OK, result
