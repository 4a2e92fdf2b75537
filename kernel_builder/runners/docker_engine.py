"""The Docker engine, as the docker runner and the image builder reach it."""

from __future__ import annotations

import os

from kernel_builder.errors import KbuildError, UsageError


def engine_address() -> str:
    """Where the Docker SDK looks for the engine: $DOCKER_HOST, else the default socket."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def docker_client():
    """A docker SDK client connected to a live engine ($DOCKER_HOST or the default
    socket), or a one-line KbuildError saying there is none."""
    try:
        import docker
    except ImportError:
        docker = None
    if not hasattr(docker, "from_env"):  # not installed, or a folder named docker shadows it
        raise UsageError("the docker runner needs the Docker SDK for Python: pip install 'kbuild[docker]'")
    host = engine_address()
    try:
        client = docker.from_env()
        client.ping()
    except Exception:  # noqa: BLE001 -- a bad DOCKER_HOST, no socket, a refused connection, a timeout: all mean no engine
        raise KbuildError(f"no Docker engine reachable (DOCKER_HOST={host}): start Docker or use --runner local") from None
    return client
