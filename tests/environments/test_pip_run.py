"""pip's download progress (environments.pip_run), read from real pip output: captured
from real installs of small packages (tests/fixtures/pip-output/: pip 23.2 into a pipe, as
a new venv's pip prints; pip 26.3 with --progress-bar raw; pip 23.2 from a local file
index), and from a real install into a new venv."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernel_builder.environments.pip_run import PipProgress, amount, progress_args, run_logged

OUTPUT = Path(__file__).resolve().parents[1] / "fixtures" / "pip-output"
# Sizes as an announcement would give them (pygments' is the one pip's raw progress reports).
SIZES = {"rich-14.0.0-py3-none-any.whl": 243_229, "markdown_it_py-3.0.0-py3-none-any.whl": 87_528,
         "mdurl-0.1.2-py3-none-any.whl": 9_979, "pygments-2.19.1-py3-none-any.whl": 1_225_293}
TOTAL = sum(SIZES.values())


def _texts(name: str, tracker: PipProgress) -> list[str]:
    return [text for line in (OUTPUT / name).read_text().splitlines() if (text := tracker.feed(line))]


def test_old_pip_moves_file_by_file_against_the_announced_total():
    tracker = PipProgress(SIZES, TOTAL)
    texts = _texts("pip-23.2-piped.txt", tracker)
    assert texts[0] == "downloading rich-14.0.0-py3-none-any.whl: 0.0 of 1.6 MB"
    assert "downloading rich-14.0.0-py3-none-any.whl: 0.2 of 1.6 MB" in texts  # its finished bar
    assert "downloading pygments-2.19.1-py3-none-any.whl: 0.3 of 1.6 MB" in texts  # three files done
    assert texts[-1] == "installing 4 packages"
    assert tracker.done_bytes == TOTAL


def test_raw_progress_counts_bytes_within_a_file():
    tracker = PipProgress(SIZES, TOTAL)
    texts = _texts("pip-26.3-raw.txt", tracker)
    pygments = [t for t in texts if t.startswith("downloading pygments")]
    assert pygments == ["downloading pygments-2.19.1-py3-none-any.whl: 0.3 of 1.6 MB"] * 2 + [
        "downloading pygments-2.19.1-py3-none-any.whl: 0.6 of 1.6 MB",
        "downloading pygments-2.19.1-py3-none-any.whl: 1.6 of 1.6 MB",
    ]
    assert tracker.done_bytes == TOTAL


def test_local_files_and_an_unknown_total():
    tracker = PipProgress()
    texts = _texts("pip-23.2-local-index.txt", tracker)
    assert texts == ["using local idna-3.20-py3-none-any.whl: 0 B so far", "installing 1 package"]
    assert amount(1_234_000_000, 5_400_000_000) == "1.2 of 5.4 GB"
    assert amount(1_234_000, None) == "1.2 MB so far"


def test_updates_are_throttled_and_the_log_gets_everything(tmp_path):
    """A command printing pip's lines fast: every line in the log, at most one update per interval."""
    lines = (OUTPUT / "pip-26.3-raw.txt").read_text()
    script = f"import sys\nsys.stdout.write({lines!r})\n"
    heard: list[str] = []
    log = tmp_path / "pip.log"
    assert run_logged([[sys.executable, "-c", script]], log, heard.append, PipProgress(SIZES, TOTAL), interval=3600)
    # Download figures once within the interval; the step to installing is always said.
    assert heard == ["downloading rich-14.0.0-py3-none-any.whl: 0.0 of 1.6 MB", "installing 4 packages"]
    assert log.read_text().endswith(lines) and log.read_text().startswith("$ ")
    assert not run_logged([[sys.executable, "-c", "raise SystemExit(3)"]], log)


@pytest.mark.e2e
def test_a_real_install_into_a_new_venv_reports_progress(tmp_path):
    """A new venv's own pip (raw progress where it is >= 24.1), a small package from pip's
    configured indexes: progress names the file, the log holds pip's whole output."""
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    heard: list[str] = []
    log = tmp_path / "pip.log"
    command = [python, "-m", "pip", "install", "--no-cache-dir", *progress_args(python), "idna==3.*"]
    if not run_logged([command], log, heard.append, interval=0):
        pytest.skip(f"pip could not install idna here: {log.read_text()[-300:]}")
    assert any("idna-3." in text and (" so far" in text) for text in heard), heard
    assert heard[-1] == "installing 1 package"
    assert "Successfully installed idna-3." in log.read_text()


# A project whose in-tree build backend pip runs in a subprocess of its own (pip always runs
# PEP 517 hooks in a child) that records its pid, then blocks: a real pip with a real child.
_BLOCKING_BACKEND = '''
import os, pathlib, time
def _block(*args, **kwargs):
    pathlib.Path(os.environ["BACKEND_PID_FILE"]).write_text(str(os.getpid()))
    time.sleep(600)
get_requires_for_build_wheel = prepare_metadata_for_build_wheel = build_wheel = _block
'''
_KBUILD_RUNNING_PIP = """
import sys
from pathlib import Path
from kernel_builder.environments.pip_run import run_logged
run_logged([sys.argv[1:]], Path(os.environ["PIP_LOG"]))
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(sys.platform != "linux", reason="reads process states in /proc")
def test_a_killed_kbuild_takes_pip_and_the_processes_pip_started_with_it(tmp_path):
    """kbuild SIGKILLed while pip's build backend (pip's child) runs: pip and the backend
    both end within seconds; PR_SET_PDEATHSIG alone ended pip and left the backend running."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
        '[project]\nname = "blocks"\nversion = "0"\n')
    (project / "backend.py").write_text(_BLOCKING_BACKEND)
    pid_file = tmp_path / "backend.pid"
    env = {**os.environ, "BACKEND_PID_FILE": str(pid_file), "PIP_LOG": str(tmp_path / "pip.log")}
    pip = [sys.executable, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-deps", str(project)]
    kbuild = subprocess.Popen([sys.executable, "-c", "import os\n" + _KBUILD_RUNNING_PIP, *pip], env=env)
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists() or not pid_file.read_text():
            assert kbuild.poll() is None, (tmp_path / "pip.log").read_text()
            assert time.monotonic() < deadline, "pip never ran the build backend"
            time.sleep(0.05)
        backend = int(pid_file.read_text())
        pip_pid = int(Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1])
        assert "pip" in Path(f"/proc/{pip_pid}/cmdline").read_text()  # the backend is pip's child
        kbuild.kill()
        kbuild.wait()
        deadline = time.monotonic() + 10
        while (_alive(backend) or _alive(pip_pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pip_pid), "pip outlived the kbuild that ran it"
        assert not _alive(backend), "pip's build backend outlived the kbuild that ran pip"
    finally:
        kbuild.kill()
        kbuild.wait()
