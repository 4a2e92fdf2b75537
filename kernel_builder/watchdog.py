"""A small process that undoes what kbuild started when kbuild ends without undoing it itself.

SIGKILL runs no exit handler, and what kbuild starts may outlive it: an sccache server
daemonizes (PR_SET_PDEATHSIG on it is lost), pip's build backends are pip's children, not
kbuild's. So with each such thing kbuild starts a watchdog: a process in a session of its
own (a Ctrl-C to the terminal's group or a kill of kbuild's group leaves it alone) that
blocks reading a pipe whose write end only kbuild holds (and, with `share`, the build tools
kbuild starts: cmake passes `shared_fds()` to them). kbuild disarms it with one byte once the
thing has ended or been stopped; end of file without that byte means every holder died:
the watchdog then calls its action, a kernel_builder function named with its arguments.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

_lock = threading.Lock()
_shared: set[int] = set()  # write ends that build tools hold too
_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)


class Watchdog:
    def __init__(self, action: str, *args: str | int, share: bool = False):
        """Start a watchdog that calls `action` ("kernel_builder.module:function") with `args`
        once this process (and, with `share`, every build tool started while it is armed)
        has ended without disarming it."""
        read_end, self._write_end = os.pipe()  # both close-on-exec: no other child gets them
        try:
            environment = {**os.environ, "PYTHONPATH": os.pathsep.join(
                [_PACKAGE_PARENT, *filter(None, [os.environ.get("PYTHONPATH")])])}
            # cwd "/": `-m` puts the working folder first on sys.path, so none of the caller's.
            self._process = subprocess.Popen(
                [sys.executable, "-m", __name__, str(read_end), action, json.dumps(list(args))],
                pass_fds=(read_end,), start_new_session=True, cwd="/", env=environment,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except BaseException:
            os.close(self._write_end)
            raise
        finally:
            os.close(read_end)
        if share:
            with _lock:
                _shared.add(self._write_end)

    def disarm(self) -> None:
        """The thing is stopped or ended: the watchdog exits without acting."""
        with _lock:
            if self._write_end < 0:
                return
            _shared.discard(self._write_end)
            try:
                os.write(self._write_end, b"x")
            except OSError:
                pass  # the watchdog is gone already
            os.close(self._write_end)
            self._write_end = -1
        # Not waited for: subprocess reaps it with the next Popen.


def shared_fds() -> tuple[int, ...]:
    """The write ends a build tool holds too (subprocess pass_fds)."""
    with _lock:
        return tuple(sorted(_shared))


def _main(read_end: int, action: str, args: list) -> None:
    while True:
        try:
            disarmed = os.read(read_end, 1)
            break
        except InterruptedError:
            continue
    if disarmed:
        return
    module, _, function = action.partition(":")
    if module.split(".")[0] != "kernel_builder":
        raise SystemExit(f"not a kernel_builder action: {action}")
    getattr(importlib.import_module(module), function)(*args)


if __name__ == "__main__":
    _main(int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]))
