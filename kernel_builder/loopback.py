"""Ports on 127.0.0.1: a free one to start a server on, and whether a server answers on one."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nobody listens on now (a server started later may still lose it to a race)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int, timeout_s: float = 1.0) -> bool:
    """Whether a server accepts connections on `port`."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=timeout_s).close()
        return True
    except OSError:
        return False
