"""Running pip for kbuild: all of its output into a log, its download progress to a callback,
and the line that says why it failed.

pip >= 24.1 prints machine-readable progress with `--progress-bar raw` ("Progress N of M"
bytes of the file it names on its "Downloading NAME (SIZE)" line). Older pip (ensurepip's
23.2 in a new venv) prints, into a pipe, only that line and the finished bar ("12.0/12.0
MB"): progress then moves file by file. Either way the bytes count against the total the
dry run announced (environments.download_cost), the files it sized by name.

pip dies with kbuild, and so does every process pip starts (build backends, pip's own
subprocesses): pip runs in a process group of its own, which kbuild kills when it stops pip
and a watchdog (kernel_builder.watchdog) kills when kbuild was killed, even by SIGKILL; on
Linux pip itself also gets SIGKILL when kbuild's thread that started it ends (prctl
PR_SET_PDEATHSIG), the watchdog's first moment included. So no orphan keeps writing into an
environment folder that the next kbuild removes and creates again. An index URL with a
password reaches pip through its environment (PIP_INDEX_URL), never its arguments (which
any local user can read in /proc), and every line of the log is written masked.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence
from urllib.parse import unquote

from kernel_builder.formatting import human_size
from kernel_builder.redaction import mask_credentials
from kernel_builder.watchdog import Watchdog

RAW_PROGRESS_PIP = (24, 1)  # the first pip with --progress-bar raw
PROGRESS_INTERVAL_S = 0.5  # at most two updates a second: a table redraws at 4

_UNITS = {"B": 1, "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_SIZE = r"([\d.]+) (B|kB|KB|MB|GB|TB)"
_DOWNLOADING = re.compile(rf"^Downloading (\S+)(?: \({_SIZE}\))?")
_LOCAL = re.compile(r"^Processing (\S+\.(?:whl|tar\.gz|zip))$")
_CACHED = re.compile(rf"^Using cached (\S+)(?: \({_SIZE}\))?")
_RAW = re.compile(r"^Progress (\d+) of (\d+)$")
_BAR = re.compile(r"([\d.]+)/([\d.]+) (B|kB|KB|MB|GB|TB) ")
_INSTALLING = re.compile(r"^Installing collected packages: (.*)$")


def _bytes(number: str | None, unit: str | None) -> int | None:
    return int(float(number) * _UNITS[unit]) if number and unit else None


def _file_name(path_or_url: str) -> str:
    """The file name pip printed (a path, a URL, or the name itself), as download_cost names it."""
    return unquote(path_or_url.rstrip("/").rsplit("/", 1)[-1])


def amount(done: int, total: int | None) -> str:
    """'1.2 of 3.0 GB' (the total's unit for both), or '1.2 GB so far' without a total."""
    if not total:
        return f"{human_size(done)} so far"
    number, unit = human_size(total).split(" ")
    scale = total / float(number) if float(number) else 1
    return f"{done / scale:.1f} of {number} {unit}"


class PipProgress:
    """Reads pip's output line by line; `feed` answers the new progress text, else None."""

    def __init__(self, sizes: dict[str, int] | None = None, total: int | None = None):
        self.sizes = dict(sizes or {})
        self.total = total
        self.done_bytes = 0
        self._done: set[str] = set()
        self._current: list | None = None  # [verb, file name, size or None, bytes so far]

    def feed(self, line: str) -> str | None:
        line = line.strip()
        if m := _RAW.match(line):
            if self._current is not None:
                self._current[2], self._current[3] = int(m.group(2)), int(m.group(1))
            return self.text()
        if m := _DOWNLOADING.match(line):
            name = _file_name(m.group(1))
            if name.endswith(".metadata"):
                return None  # PEP 658 metadata of a candidate, not the file itself
            return self._start("downloading", name, _bytes(m.group(2), m.group(3)))
        if m := _CACHED.match(line):
            return self._start("using cached", _file_name(m.group(1)), _bytes(m.group(2), m.group(3)))
        if m := _LOCAL.match(line):
            return self._start("using local", _file_name(m.group(1)), None)
        if (m := _BAR.search(line)) and self._current is not None:
            self._current[3] = _bytes(m.group(1), m.group(3)) or 0
            return self.text()
        if m := _INSTALLING.match(line):
            self._finish()
            count = len([name for name in m.group(1).split(",") if name.strip()])
            return f"installing {count} package{'s' if count != 1 else ''}"
        return None

    def _start(self, verb: str, name: str, size: int | None) -> str:
        self._finish()
        self._current = [verb, name, self.sizes.get(name, size), 0]
        return self.text()

    def _finish(self) -> None:
        if self._current is None:
            return
        _, name, size, got = self._current
        if name not in self._done:  # pip may name a file twice (resolving, then installing)
            self._done.add(name)
            self.done_bytes += size if size is not None else got
        self._current = None

    def text(self) -> str:
        if self._current is None:
            return amount(self.done_bytes, self.total)
        verb, name, _, got = self._current
        return f"{verb} {name}: {amount(self.done_bytes + got, self.total)}"


def progress_args(python: str) -> list[str]:
    """`--progress-bar raw` where `python`'s pip has it (>= 24.1), else nothing."""
    try:
        out = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    m = re.match(r"pip (\d+)\.(\d+)", out)
    return ["--progress-bar", "raw"] if m and (int(m.group(1)), int(m.group(2))) >= RAW_PROGRESS_PIP else []


_PR_SET_PDEATHSIG = 1


@functools.cache
def _prctl() -> Callable[..., int] | None:
    # Looked up before any fork: the child only calls it.
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def dies_with_kbuild() -> Callable[[], None] | None:
    """A Popen preexec_fn that makes the child die with this thread of kbuild (None where
    the system has no such thing)."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # kbuild died before the prctl took effect
            os._exit(1)

    return preexec


@contextmanager
def pip_process(command: Sequence[str], **popen_args) -> Iterator[subprocess.Popen]:
    """`command` (a pip) running, in a process group of its own that stops whole with kbuild
    (module docstring); the group is killed if the block is left before pip ended (an
    error, a timeout, Ctrl-C)."""
    process = subprocess.Popen(command, start_new_session=True, preexec_fn=dies_with_kbuild(), **popen_args)
    try:
        watchdog = Watchdog(f"{__name__}:kill_group", process.pid)
    except BaseException:
        kill_group(process.pid)
        process.wait()
        raise
    try:
        with process:
            try:
                yield process
            finally:
                if process.poll() is None:  # its group id is still its own
                    kill_group(process.pid)
    finally:
        watchdog.disarm()


def kill_group(group: int) -> None:
    """SIGKILL to every process of `group` (pip and what it started)."""
    try:
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # all ended


def pip_environment(index_url: str | None) -> dict[str, str] | None:
    """The environment of a pip that installs from `index_url` (None: pip's own configuration)."""
    return None if not index_url else {**os.environ, "PIP_INDEX_URL": index_url}


def run_logged(
    steps: Sequence[Sequence[str]], log: Path, on_progress: Callable[[str], None] | None = None,
    tracker: PipProgress | None = None, interval: float = PROGRESS_INTERVAL_S, append: bool = False,
    environment: Mapping[str, str] | None = None,
) -> bool:
    """Run the commands in turn (with `environment`, default kbuild's), all their output,
    credentials masked, into `log` (after what it holds, with `append`); False at the first
    that fails. pip's progress goes to `on_progress`, at most once per `interval` seconds."""
    tracker = tracker or PipProgress()
    last = float("-inf")
    with log.open("ab" if append else "wb") as out:
        for step in steps:
            out.write(mask_credentials(f"$ {shlex.join(step)}\n").encode())
            out.flush()
            # Ctrl-C included: pip goes with kbuild (pip_process).
            with pip_process(step, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             env=environment) as proc:
                for raw in proc.stdout:  # type: ignore[union-attr]
                    out.write(mask_credentials(raw.decode(errors="surrogateescape")).encode(errors="surrogateescape"))
                    text = None
                    for part in raw.decode(errors="replace").split("\r"):  # a terminal bar redraws with \r
                        text = tracker.feed(part) or text
                    # Download figures are throttled; the step to installing is always said.
                    due = text is not None and (text.startswith("installing ") or time.monotonic() - last >= interval)
                    if text and on_progress is not None and due:
                        last = time.monotonic()
                        on_progress(text)
                out.flush()
                proc.wait()
            if proc.returncode != 0:
                return False
    return True


def pip_reason(output: str) -> str:
    """The line of pip's output that says why it failed."""
    lines = [line.strip() for line in output.splitlines() if line.strip() and not line.startswith("$ ")]
    # "ERROR: ResolutionImpossible: for help visit ..." is pip's footer, not the reason.
    errors = [line for line in lines if line.startswith("ERROR:") and "ResolutionImpossible" not in line]
    reason = (errors or lines or ["no output"])[-1]
    if reason == "ERROR: Exception:" and lines:
        # pip crashed: the traceback's last line (e.g. "OSError: [Errno 28] No space left") is the reason.
        reason = f"pip crashed: {lines[-1]}"
    # A pip constraints file (pip config) is a common and invisible cause: name it.
    constraints = [line.split("(constraint)", 1)[1].strip() for line in lines if "requested (constraint)" in line]
    return reason + (f" (pip constraint: {', '.join(constraints)})" if constraints else "")
