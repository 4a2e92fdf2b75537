"""A build's tool processes: stopped with their children on an interrupt, and a tool ended by
a signal is reported as interrupted, never as a failed compile. Real processes."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from kernel_builder.compile.tool_processes import ToolProcesses
from kernel_builder.errors import Interrupted

# A tool that starts a child of its own (as CMake starts Ninja, Ninja the compilers) and waits.
PARENT = "import subprocess, sys; child = subprocess.Popen(['sleep', '60']); print(child.pid, flush=True); child.wait()"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


def test_stop_ends_a_running_tool_and_its_children(tmp_path):
    tools, outcome = ToolProcesses(), {}
    out = tmp_path / "out.txt"
    out.write_text("")

    def run():
        try:
            with open(out, "w") as f:
                outcome["code"] = tools.run([sys.executable, "-c", PARENT], "compile", stdout=f)
        except Interrupted as e:
            outcome["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 30
    while not out.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(out.read_text())
    tools.stop()
    thread.join(10)
    assert not thread.is_alive() and outcome["error"].message == "interrupted"
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)
    with pytest.raises(Interrupted):  # nothing starts once stopped
        tools.run(["true"], "compile")


@pytest.mark.parametrize("script,words", [
    ("import os, signal; signal.signal(signal.SIGINT, signal.SIG_DFL); os.kill(os.getpid(), signal.SIGINT)",
     "compile stopped by SIGINT"),
    ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", "compile stopped by SIGTERM"),
    ("raise SystemExit(130)", "compile stopped: Ninja was interrupted"),  # what cmake --build returns then
])
def test_a_tool_ended_by_a_signal_is_interrupted_not_failed(script, words):
    with pytest.raises(Interrupted, match=words):
        ToolProcesses().run([sys.executable, "-c", script], "compile")
    assert ToolProcesses().run([sys.executable, "-c", "raise SystemExit(1)"], "compile") == 1  # a failure stays one


def test_tools_run_in_a_session_of_their_own(tmp_path):
    # Ctrl-C on a terminal signals its foreground group: the tools must not be in it, kbuild stops them.
    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        ToolProcesses().run([sys.executable, "-c", "import os; print(os.getsid(0), os.getpid())"], "compile", stdout=f)
    session, pid = map(int, out.read_text().split())
    assert session == pid != os.getsid(0)
