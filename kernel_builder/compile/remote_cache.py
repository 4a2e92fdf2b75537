"""sccache's shared remote cache: which backend the SCCACHE_* variables select, and whether it answers.

kbuild builds no cache of its own: the sccache server it starts for a job inherits the
environment, so every backend setting sccache reads (SCCACHE_REDIS_ENDPOINT,
SCCACHE_BUCKET with SCCACHE_REGION/SCCACHE_ENDPOINT, SCCACHE_GCS_BUCKET,
SCCACHE_GHA_ENABLED, SCCACHE_WEBDAV_ENDPOINT, ...) reaches it unchanged. This module only
names the backend (for the build summary and `kbuild doctor`) and, for Redis, checks
that it answers a PING.

Example:
    >>> backend = remote_backend({"SCCACHE_REDIS_ENDPOINT": "redis://:secret@10.0.0.5:6379"})
    >>> backend.describe()
    'redis redis://***@10.0.0.5:6379 (SCCACHE_REDIS_ENDPOINT)'
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import urlsplit

from kernel_builder.redaction import mask_credentials

# The variable that selects each backend, in the order sccache itself checks them.
BACKEND_VARIABLES = (
    ("s3", "SCCACHE_BUCKET"),
    ("redis", "SCCACHE_REDIS_ENDPOINT"),
    ("redis", "SCCACHE_REDIS_CLUSTER_ENDPOINTS"),
    ("redis", "SCCACHE_REDIS"),  # sccache's older single-URL spelling
    ("memcached", "SCCACHE_MEMCACHED_ENDPOINT"),
    ("gcs", "SCCACHE_GCS_BUCKET"),
    ("gha", "SCCACHE_GHA_ENABLED"),
    ("azure", "SCCACHE_AZURE_CONNECTION_STRING"),
    ("webdav", "SCCACHE_WEBDAV_ENDPOINT"),
    ("oss", "SCCACHE_OSS_BUCKET"),
    ("cos", "SCCACHE_COS_BUCKET"),
)
BACKENDS = tuple(dict.fromkeys(name for name, _ in BACKEND_VARIABLES))

# What the GitHub Actions cache backend needs besides SCCACHE_GHA_ENABLED: the runner's
# cache service, which only a step of a workflow sees (see `kbuild ci github`).
GHA_RUNTIME_VARIABLES = ("ACTIONS_RESULTS_URL", "ACTIONS_RUNTIME_TOKEN")

_PING_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class RemoteBackend:
    name: str  # one of BACKENDS
    variable: str  # the SCCACHE_* variable that selected it
    target: str  # its value, credentials masked ("on" for GHA)

    def describe(self) -> str:
        return f"{self.name} {self.target} ({self.variable})"


def remote_backend(environ: Mapping[str, str] | None = None) -> RemoteBackend | None:
    """The remote backend sccache would use with `environ` (default os.environ); None: its local disk."""
    environ = os.environ if environ is None else environ
    for name, variable in BACKEND_VARIABLES:
        value = environ.get(variable, "").strip()
        if name == "gha":
            if value.lower() in ("on", "true", "1"):
                return RemoteBackend(name, variable, "on")
        elif value:
            return RemoteBackend(name, variable, mask_credentials(value))
    return None


def probe(backend: RemoteBackend, environ: Mapping[str, str] | None = None) -> tuple[bool | None, str]:
    """(answers?, what was found): True/False where kbuild can ask the backend itself (a
    Redis PING over a socket), None where it can only say what is configured."""
    environ = os.environ if environ is None else environ
    if backend.name == "redis" and backend.variable != "SCCACHE_REDIS_CLUSTER_ENDPOINTS":
        return redis_ping(environ[backend.variable])
    if backend.name == "gha":
        missing = [v for v in GHA_RUNTIME_VARIABLES if not environ.get(v)]
        if missing:
            return False, f"{', '.join(missing)} not set: only a GitHub Actions step gets them (export them to the step)"
        return None, "GitHub Actions cache service configured"
    return None, "configured (not checked: sccache reports errors per compile)"


def redis_ping(url: str) -> tuple[bool, str]:
    """A RESP PING (after AUTH when the URL carries a password) to a redis:// URL."""
    parts = urlsplit(url if "://" in url else f"redis://{url}")
    if parts.scheme not in ("redis", "tcp"):
        return False, f"{parts.scheme}:// is not checked here (a plain redis:// URL is)"
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    commands = []
    if parts.password:
        commands.append(("AUTH", *([parts.username] if parts.username else []), parts.password))
    commands.append(("PING",))
    request = b"".join(
        f"*{len(c)}\r\n".encode() + b"".join(f"${len(a.encode())}\r\n{a}\r\n".encode() for a in c) for c in commands
    )
    where = f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=_PING_TIMEOUT_S) as connection:
            connection.sendall(request)
            reply = b""
            while reply.count(b"\r\n") < len(commands):
                chunk = connection.recv(4096)
                if not chunk:
                    break
                reply += chunk
    except OSError as e:
        return False, f"no answer from {where}: {e.strerror or e}"
    last = reply.split(b"\r\n")[len(commands) - 1] if reply.count(b"\r\n") >= len(commands) else reply
    if last == b"+PONG":
        return True, f"{where} answered PING"
    return False, f"{where} answered {reply.decode(errors='replace').strip()!r} to PING"
