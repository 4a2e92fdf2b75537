"""The tool processes of a build (CMake, and through it Ninja and the compilers), so that an
interrupt stops them all and says so, instead of reporting a failed compile.

Ctrl-C on a terminal signals the terminal's whole foreground group; a CI runner or `kill`
signals kbuild alone. Each tool runs in a session of its own, so it hears neither: kbuild
stops the running ones itself (`stop`), and both cases end alike, with no compiler left
running after kbuild has exited."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

from kernel_builder.errors import Interrupted

# What cmake --build returns when Ninja was interrupted (Ninja's own code for it).
_NINJA_INTERRUPTED = 130


class ToolProcesses:
    def __init__(self):
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self.stopped = False

    def run(self, command: list[str], what: str, **popen_args) -> int:
        """Run `command` to its end and return its exit code. Raises Interrupted when the
        build was stopped, or a signal (not a compile error) ended the tool: `what`
        ("compile") names the step in the message."""
        with self._lock:
            self.raise_if_stopped()
            process = subprocess.Popen(command, start_new_session=True, **popen_args)
            self._running.add(process)
        try:
            code = process.wait()
        finally:
            with self._lock:
                self._running.discard(process)
        self.raise_if_stopped()
        if code < 0:
            raise Interrupted(f"{what} stopped by {signal.Signals(-code).name}", -code)
        if code == _NINJA_INTERRUPTED:
            raise Interrupted(f"{what} stopped: Ninja was interrupted")
        return code

    def raise_if_stopped(self) -> None:
        if self.stopped:
            raise Interrupted("interrupted")

    def stop(self, force: bool = False) -> None:
        """End every running tool with its children (SIGTERM; SIGKILL when `force`); no
        new one starts."""
        with self._lock:
            self.stopped = True
            running = list(self._running)
        for process in running:
            try:
                os.killpg(process.pid, signal.SIGKILL if force else signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass  # it has just ended
