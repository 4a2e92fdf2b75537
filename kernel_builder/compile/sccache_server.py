"""The sccache servers kbuild owns, and the per-job figures read from them.

sccache compiles through one server per SCCACHE_SERVER_UDS, and a running server keeps
the settings it started with (backend, SCCACHE_DIR, base folders, dist config). So kbuild
never relies on a server someone else started, and its own listen on sockets only this user
can reach (never a TCP port: a server runs whatever compiler a client names; sccache_sockets):

- with a remote backend or a dist scheduler, every job starts its own server, whose
  statistics are that job's alone (remote hits and misses), and stops it when the job's
  compiles are done;
- with only the local disk cache, one server per kbuild process serves every job (sccache's
  disk cache takes one server at a time); a job's figures are the difference of its
  statistics, kept only when no other job compiled meanwhile.

Servers still running when kbuild exits (a failed job) are stopped then. A killed kbuild's
servers are stopped by their watchdogs once kbuild and the build tools it started have
ended (kernel_builder.watchdog: sccache daemonizes, so nothing dies with kbuild by itself);
those whose watchdog was killed too, by the next kbuild (sccache_sockets).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from kernel_builder.compile.sccache_sockets import listening, new_socket, terminate_listener
from kernel_builder.errors import BuildError
from kernel_builder.watchdog import Watchdog

SOCKET = "SCCACHE_SERVER_UDS"
BASEDIRS = "SCCACHE_BASEDIRS"
_STATE_FILE = "sccache-server.json"  # in the job's work folder: which server, figures at its start
_START_TIMEOUT_S = 60

_lock = threading.Lock()
_started: dict[Path, tuple[str, Watchdog]] = {}  # socket -> sccache executable and watchdog; stopped at exit
_shared: dict[tuple, Path] = {}  # (executable, settings) -> socket of the process-wide server
_active: dict[str, bool] = {}  # work folder of each job on the shared server -> it overlapped another


@dataclass(frozen=True)
class Counts:
    hits: int
    misses: int
    distributed: int
    location: str


def _run(path: str, socket: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environment = dict(os.environ if env is None else env)
    environment.pop("SCCACHE_SERVER_PORT", None)
    environment[SOCKET] = str(socket)
    return subprocess.run([path, *args], env=environment, capture_output=True, text=True, timeout=_START_TIMEOUT_S)


def start_server(path: str, settings: dict[str, str]) -> Path:
    """A new server with os.environ plus `settings`; its socket."""
    socket = new_socket()
    # Armed before the server starts: there is no moment when a kill of kbuild leaves it running.
    # Shared with the build tools: their compiles use it after a killed kbuild too.
    watchdog = Watchdog(f"{__name__}:stop_server", path, str(socket), share=True)
    try:
        result = _run(path, socket, "--start-server", env={**os.environ, **settings})
    except BaseException:
        stop_server(path, socket, watchdog)
        raise
    if result.returncode == 0:
        with _lock:
            _started[socket] = (path, watchdog)
        return socket
    stop_server(path, socket, watchdog)
    detail = (result.stderr or result.stdout).strip().splitlines()
    raise BuildError(f"sccache could not start its server: {detail[-1] if detail else f'exit {result.returncode}'}")


def stop_server(path: str, socket: Path | str, watchdog: Watchdog | None = None) -> None:
    socket = Path(socket)
    with _lock:
        _, watchdog = _started.pop(socket, (path, watchdog))
    try:
        if listening(socket):  # sccache's client would start a server only to stop it
            _run(path, socket, "--stop-server")
    except (OSError, subprocess.SubprocessError):
        pass
    terminate_listener(socket)  # one that did not stop when asked
    socket.unlink(missing_ok=True)  # sccache leaves it
    if watchdog is not None:
        watchdog.disarm()


@atexit.register
def _stop_leftovers() -> None:
    for socket, (path, _) in list(_started.items()):
        stop_server(path, socket)


def read_counts(path: str, socket: Path) -> Counts | None:
    """The server's statistics, or None when none runs there."""
    if not listening(socket):
        return None
    try:
        result = _run(path, socket, "--show-stats", "--stats-format=json")
        data = json.loads(result.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    stats = data.get("stats", {})

    def total(key: str) -> int:
        return sum(stats.get(key, {}).get("counts", {}).values())

    def cuda(key: str) -> int:
        return stats.get(key, {}).get("counts", {}).get("CUDA", 0)

    # Compiles that failed or could not be cached count as misses: the compiler ran. Not
    # nvcc itself, which sccache never caches: it runs nvcc's steps (cudafe++, cicc, ptxas,
    # the host compile, counted as "CUDA") one by one, each a hit or a miss of its own.
    nvcc_drivers = min(stats.get("non_cacheable_compilations", 0), cuda("cache_hits") + cuda("cache_misses"))
    misses = total("cache_misses") + stats.get("non_cacheable_compilations", 0) - nvcc_drivers
    distributed = sum(stats.get("dist_compiles", {}).values())
    return Counts(total("cache_hits"), misses, distributed, data.get("cache_location") or "")


def server_environment(socket: Path, settings: dict[str, str]) -> dict[str, str]:
    """What the job's compiles need: its server's socket, and the settings again, so that a
    server that died is started again the same way by the next compile."""
    return {**settings, SOCKET: str(socket)}


def start_job_server(path: str, work_dir: Path, settings: dict[str, str]) -> dict[str, str]:
    """A server for this job alone; the job's compile environment."""
    socket = start_server(path, settings)
    _write_state(work_dir, {"socket": str(socket), "own": True})
    return server_environment(socket, settings)


def join_shared_server(path: str, work_dir: Path, settings: dict[str, str]) -> dict[str, str]:
    """The process-wide server (started by the first job); the job's compile environment."""
    key = (path, tuple(sorted(settings.items())))
    with _lock:
        socket = _shared.get(key)
    if socket is None or not listening(socket):
        socket = start_server(path, settings)
        with _lock:
            _shared[key] = socket
    before = read_counts(path, socket)
    with _lock:
        for other in _active:
            _active[other] = True
        _active[str(work_dir)] = bool(_active)
    _write_state(work_dir, {"socket": str(socket), "own": False, "before": None if before is None else before.__dict__})
    return server_environment(socket, settings)


def finish_job(path: str, work_dir: Path) -> Counts | None:
    """The job's figures; its own server stops. None: nothing compiled, or a shared server
    that other jobs used meanwhile."""
    try:
        state = json.loads((work_dir / _STATE_FILE).read_text())
        socket = Path(state["socket"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    finally:
        (work_dir / _STATE_FILE).unlink(missing_ok=True)
    counts = read_counts(path, socket)
    if state["own"]:
        stop_server(path, socket)
    else:
        with _lock:
            overlapped = _active.pop(str(work_dir), True)
        before = state.get("before")
        if counts is None or before is None or overlapped:
            return None
        counts = Counts(counts.hits - before["hits"], counts.misses - before["misses"],
                        counts.distributed - before["distributed"], counts.location)
    if counts is None or counts.hits + counts.misses == 0:
        return None
    return counts


def _write_state(work_dir: Path, state: dict) -> None:
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / _STATE_FILE).write_text(json.dumps(state))


# A quoted absolute path in the generated CMakeLists.txt (sources, include and link folders).
_QUOTED_PATH = re.compile(r'"(/[^"$;:<>]+)"')


def project_base_dirs(work_dir: Path) -> list[str]:
    """The machine-local folders a job's compile commands name: its work folder and every
    folder the generated project names (the kernel's checkout, the build environment's
    torch and Python headers, kbuild's templates). As sccache base folders they are cut
    from the paths it hashes, so another runner, whose folders are elsewhere, computes the
    same keys (the preprocessed text still carries every header's content)."""
    folders = {str(work_dir)}
    try:
        text = (work_dir / "CMakeLists.txt").read_text()
    except OSError:
        text = ""
    for match in _QUOTED_PATH.findall(text):
        path = Path(match)
        if path.is_dir():
            folders.add(str(path))
        elif path.is_file():
            folders.add(str(path.parent))
    return sorted(f for f in folders if f != "/")
