"""Where kbuild's sccache servers listen: Unix sockets in a folder of this user's alone.

sccache's server runs whatever compiler a client names, so whoever can connect to it runs
programs as the user who builds. A loopback TCP port is open to every local user; a socket
in /tmp/kbuild-<uid>/sccache (0700, checked on every use: private_files) to this user only.

Each kbuild process names its sockets `<token>-<n>.sock` and holds `<token>.lock` (a flock,
which the kernel releases however the process ends) while it lives; so do the build tools
it starts (file_lock's inherit), which compile through those servers. kbuild stops its
servers with their jobs and at exit, and their watchdogs when kbuild was killed
(sccache_server); the servers of a kbuild that was killed with its watchdogs are stopped by
the next kbuild that starts one, once its compilers have ended too: then their lock is free. A server is found by its socket, not by a recorded pid, so one that a compile started
again after the first died (the sccache client does that) is stopped too.
"""

from __future__ import annotations

import atexit
import itertools
import os
import secrets
import signal
import socket
import struct
import threading
from contextlib import ExitStack
from pathlib import Path

from kernel_builder.compile.private_files import own_folder
from kernel_builder.file_lock import abandoned, exclusive_lock

# A literal short /tmp, not $TMPDIR: a socket's path may hold at most 107 bytes.
SOCKET_PARENT = Path("/tmp")

_lock = threading.Lock()
_held = ExitStack()  # this process's <token>.lock, held until it exits
_tokens: dict[Path, str] = {}  # socket folder -> this process's token there
_numbers = itertools.count(1)


def new_socket() -> Path:
    """A socket path for a new server of this process (no file yet)."""
    folder = own_folder(SOCKET_PARENT, "sccache")
    with _lock:
        token = _tokens.get(folder)
        if token is None:
            stop_abandoned(folder)
            token = secrets.token_hex(6)
            _held.enter_context(exclusive_lock(folder / f"{token}.lock", inherit=True))
            _tokens[folder] = token
        return folder / f"{token}-{next(_numbers)}.sock"


@atexit.register
def _release() -> None:
    # Runs after sccache_server's exit handler (registered later) has stopped the servers.
    with _lock:
        for folder, token in _tokens.items():
            (folder / f"{token}.lock").unlink(missing_ok=True)
        _tokens.clear()
        _held.close()


def stop_abandoned(folder: Path) -> None:
    """Stop the servers of every kbuild process that is gone, and remove their files."""
    for lock in abandoned(folder.glob("*.lock")):  # a lock still held: its kbuild still runs
        for path in folder.glob(f"{lock.stem}-*.sock"):
            terminate_listener(path)
            path.unlink(missing_ok=True)


def listening(path: Path) -> bool:
    """Whether a server accepts connections on the socket at `path`."""
    return _listener_pid(path) is not None


def terminate_listener(path: Path) -> None:
    """SIGTERM to this user's process that listens on `path`, if any."""
    pid = _listener_pid(path)
    if pid is not None:
        try:
            os.kill(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass  # it has just ended


def _listener_pid(path: Path) -> int | None:
    """The pid of this user's process listening on `path`, or None."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(1.0)
        try:
            connection.connect(str(path))
            credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        except OSError:
            return None
    pid, uid, _ = struct.unpack("3i", credentials)
    return pid if pid > 0 and uid == os.getuid() else None
