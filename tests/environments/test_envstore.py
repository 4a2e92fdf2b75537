"""Managed build environments (environments/store.py, cli/env.py): real venvs, real pip, real torch.

Every test gets its own store and kbuild cache (KBUILD_ENVS_DIR, KBUILD_CACHE_DIR). The one
real creation of torch 2.13 (CPU) happens once per module and is shared by the tests that
read it; `test_prune_removes_the_created_env` removes it and so comes last of those.
"""

from __future__ import annotations

import json
import re
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import optional_module
from package_index import tiny_wheel, write_index_page
from kernel_builder.cli.env import env_app
from kernel_builder.environments.probe import BuildEnv, probe_env
from kernel_builder.environments.store import (
    MARKER,
    EnvSpec,
    compute_tag,
    ensure_env,
    envs_root,
    find_env,
    list_envs,
    pip_request,
    prune,
)
from kernel_builder.errors import EnvironmentCreateError, KbuildError, VariantError
from kernel_builder.variants import Variant

REPO = Path(__file__).resolve().parents[2]
CPU_VENV = Path(sys.prefix)  # the environment running the tests: torch 2.13 CPU (the test extra)
# torch 2.14.1+cu130: the test session's managed environment, which tests/compile/test_cuda.py
# (run earlier) creates where nvcc is installed.
CUDA_VENV = envs_root() / "torch214-cu130"
NO_INDEX = "file:///nonexistent-index"  # pip skips it at once: no network wait
CPU_213 = EnvSpec((2, 13), "cpu")
runner = CliRunner()


def _use_store(monkeypatch: pytest.MonkeyPatch, root: Path) -> Path:
    monkeypatch.setenv("KBUILD_ENVS_DIR", str(root / "envs"))
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(root / "cache"))
    monkeypatch.delenv("KBUILD_TORCH_INDEX", raising=False)
    return root / "envs"


@pytest.fixture(autouse=True)
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return _use_store(monkeypatch, tmp_path)


def _need(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        pytest.skip(f"{python} is absent: no environment with that torch was made in this session (nvcc missing?)")
    return python


def _borrowed_env(store: Path, key: str, venv: Path, marker: bool = True) -> Path:
    """A managed env folder that borrows an existing venv's interpreter and site-packages
    through symlinks (cheap; prune unlinks them and never follows them)."""
    _need(venv)
    path = store / key
    (path / "bin").mkdir(parents=True)
    shutil.copy(venv / "pyvenv.cfg", path / "pyvenv.cfg")
    (path / "bin" / "python").symlink_to(venv / "bin" / "python")
    (path / "lib").symlink_to(venv / "lib")
    if marker:
        created = datetime.now(timezone.utc).isoformat(timespec="seconds")
        (path / MARKER).write_text(json.dumps({"key": key, "torch_version": "borrowed", "created": created}))
    return path


# -- EnvSpec ------------------------------------------------------------------------------
def test_spec_key_describe_and_parse():
    spec = EnvSpec((2, 14), "cu130")
    assert spec.key == "torch214-cu130"
    assert spec.describe() == "torch 2.14 (CUDA 13.0)"
    assert EnvSpec((2, 13), "rocm71").describe() == "torch 2.13 (ROCm 7.1)"
    assert EnvSpec((2, 14), "xpu20260").describe() == "torch 2.14 (XPU 2026.0)"
    assert CPU_213.describe() == "torch 2.13 (CPU)"
    assert EnvSpec.for_variant(Variant.parse("torch214-cxx11-cu130-x86_64-linux")) == spec
    assert EnvSpec.for_variant(Variant.parse("torch-stable-abi210-cu130-x86_64-linux")) == EnvSpec((2, 10), "cu130")
    assert EnvSpec.parse("torch214-cu130") == spec
    assert EnvSpec.parse("torch213-cxx11-cpu-x86_64-linux") == CPU_213
    with pytest.raises(VariantError, match="pure Python"):
        EnvSpec.for_variant(Variant.parse("torch-cpu"))
    with pytest.raises(VariantError, match="neither an environment key"):
        EnvSpec.parse("torch214-cuda")
    with pytest.raises(VariantError, match="not a compute tag"):
        EnvSpec((2, 14), "gpu")


def test_compute_tag_of_each_flavour():
    def env(**kw) -> BuildEnv:
        return BuildEnv("python", "3.11", "inc", "2.14.1", "dir", True, **kw)

    assert compute_tag(env()) == "cpu"
    assert compute_tag(env(cuda="13.0")) == "cu130"
    assert compute_tag(env(cuda="12.6")) == "cu126"
    assert compute_tag(env(hip="7.1.25424-4179531dcd")) == "rocm71"
    assert compute_tag(env(xpu="20260000")) == "xpu20260"
    assert compute_tag(env(xpu="2025.3")) == "xpu20253"


def test_satisfied_by_the_cpu_torch():
    optional_module("torch")
    cpu = probe_env(_need(CPU_VENV))
    assert cpu.torch == (2, 13) and compute_tag(cpu) == "cpu"
    assert CPU_213.satisfied_by(cpu)
    assert not EnvSpec((2, 13), "cu130").satisfied_by(cpu)
    assert not EnvSpec((2, 14), "cpu").satisfied_by(cpu)


def test_satisfied_by_a_cuda_torch():
    cuda = probe_env(_need(CUDA_VENV))
    assert compute_tag(cuda) == "cu130"
    assert EnvSpec((2, 14), "cu130").satisfied_by(cuda)
    assert EnvSpec((2, 14), "cpu").satisfied_by(cuda), "a CPU variant compiles against any flavour"
    assert not EnvSpec((2, 14), "cu126").satisfied_by(cuda)
    assert not EnvSpec((2, 13), "cpu").satisfied_by(cuda)


# -- pip_request ------------------------------------------------------------------------------
PYTORCH = "https://download.pytorch.org/whl"


@pytest.mark.parametrize(
    "torch, compute, index",
    [
        ((2, 13), "cpu", None),  # any flavour builds CPU variants: pip's own index
        ((2, 14), "cpu", None),
        ((2, 14), "cu130", None),  # what PyPI serves for 2.14
        ((2, 13), "cu130", None),
        ((2, 12), "cu128", None),
        ((2, 12), "cu130", f"{PYTORCH}/cu130"),
        ((2, 13), "cu126", f"{PYTORCH}/cu126"),
        ((2, 14), "cu132", f"{PYTORCH}/cu132"),
        ((2, 13), "rocm71", f"{PYTORCH}/rocm7.1"),
        ((2, 14), "rocm72", f"{PYTORCH}/rocm7.2"),
        ((2, 14), "xpu20260", f"{PYTORCH}/xpu"),
        ((2, 15), "cu132", None),  # PyPI's torch 2.15.0 requires cuda-toolkit 13.2 (experimental in the matrix)
        ((2, 15), "cu130", f"{PYTORCH}/cu130"),
    ],
)
def test_pip_request_default_index(torch, compute, index):
    assert pip_request(EnvSpec(torch, compute)) == (f"torch=={torch[0]}.{torch[1]}.*", index)


def test_pip_request_explicit_index_wins(monkeypatch):
    spec = EnvSpec((2, 13), "cu126")
    monkeypatch.setenv("KBUILD_TORCH_INDEX", "https://mirror.example/torch")
    assert pip_request(spec) == ("torch==2.13.*", "https://mirror.example/torch")
    assert pip_request(CPU_213) == ("torch==2.13.*", "https://mirror.example/torch")
    assert pip_request(spec, "https://other.example/simple") == ("torch==2.13.*", "https://other.example/simple")


# -- one real creation, shared --------------------------------------------------------------
@pytest.fixture(scope="module")
def created(tmp_path_factory):
    """torch 2.13 (CPU) created for real by pip, once per module."""
    root = tmp_path_factory.mktemp("store")
    said: list[str] = []
    heard: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        envs = _use_store(mp, root)
        started = time.perf_counter()
        env = ensure_env(CPU_213, say=said.append, progress=heard.append)
        seconds = time.perf_counter() - started
    print(f"\ncreated {CPU_213.key} in {seconds:.1f} s; said: {said}; progress: {heard[:3]} ... {heard[-1:]}")
    return root, envs, env, said, heard


@pytest.mark.e2e
@pytest.mark.creates_env
def test_created_env_is_reused_found_and_listed(created, monkeypatch):
    root, envs, env, said, heard = created
    _use_store(monkeypatch, root)
    path, log = envs / CPU_213.key, envs / f"{CPU_213.key}.log"
    assert env.torch == (2, 13) and env.python == str(path / "bin" / "python")
    assert len(said) == 1 and "pip install 'torch==2.13.*'" in said[0] and "first time only" in said[0]
    # What it downloads, sized from pip's dry run (or said to be unknown), before pip starts.
    assert re.search(r" — (about [\d.]+ [KMG]B( plus \d+ files? of unknown size)? to download \(torch 2\.13\.\d\S*[ ,)]"
                     r"|.* size unknown$)", said[0]), said[0]
    # pip's progress, file by file against that total, then the install.
    assert any("torch-2.13." in text and (" of " in text or " so far" in text) for text in heard), heard
    assert heard[-1].startswith("installing ") and "Successfully installed" in log.read_text()
    marker = json.loads((path / MARKER).read_text())
    assert marker["requirement"] == "torch==2.13.*" and marker["torch_version"] == env.torch_version
    before = ((path / MARKER).stat().st_mtime_ns, log.stat().st_mtime_ns)

    again = ensure_env(CPU_213, say=said.append)
    assert again == env
    assert len(said) == 1, "a second ensure_env must not create (say is only called before pip)"
    assert ((path / MARKER).stat().st_mtime_ns, log.stat().st_mtime_ns) == before, "pip ran again"
    assert json.loads((path / MARKER).read_text())["created"] == marker["created"]

    assert find_env(CPU_213) == env
    assert find_env(EnvSpec((2, 13), "cu130")) is None  # a CPU torch is no CUDA torch
    assert find_env(EnvSpec((2, 14), "cpu")) is None

    [listed] = list_envs()
    assert (listed.key, listed.path, listed.spec, listed.complete) == (CPU_213.key, path, CPU_213, True)
    assert listed.torch_version == env.torch_version
    assert listed.size_bytes > 200_000_000  # torch 2.13 CPU is about 1 GB on disk
    assert listed.created == datetime.fromisoformat(marker["created"])
    assert listed.last_used is not None and listed.last_used >= listed.created

    result = runner.invoke(env_app, ["list", "--json"])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)
    assert row["key"] == CPU_213.key and row["complete"] and row["torch"] == "2.13" and row["compute"] == "cpu"


@pytest.mark.e2e
@pytest.mark.creates_env
def test_prune_removes_the_created_env(created, monkeypatch):
    root, envs, env, *_ = created
    _use_store(monkeypatch, root)
    with pytest.raises(KbuildError, match=f"no managed build environment torch299-cpu .*known: {CPU_213.key}"):
        prune(keys=["torch299-cpu"])
    assert prune() == [], "a complete env is kept unless asked for"
    [removed] = prune(keys=[CPU_213.key])
    assert removed.key == CPU_213.key and removed.size_bytes > 200_000_000
    assert sorted(p.name for p in envs.iterdir()) == [], "env, log and lock all gone"
    assert find_env(CPU_213) is None and list_envs() == []


# -- failures ---------------------------------------------------------------------------------
@pytest.mark.e2e
@pytest.mark.creates_env
def test_pip_failure_leaves_no_env_and_one_line(store, tmp_path, monkeypatch):
    # Offline and fast: the primary index does not exist and the find-links folder (pip
    # config on this machine points at one with a torch wheel) is replaced by an empty one.
    links = tmp_path / "no-wheels"
    links.mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    spec = EnvSpec((2, 13), "cu126")
    with pytest.raises(EnvironmentCreateError) as info:
        ensure_env(spec, index=NO_INDEX)
    message, log = info.value.message, store / f"{spec.key}.log"
    assert "\n" not in message
    assert "torch==2.13.*" in message and NO_INDEX in message and f"log: {log}" in message
    assert "ERROR:" in message, "the message carries pip's own reason"
    assert not (store / spec.key).exists()
    assert log.is_file() and "pip install" in log.read_text()
    assert find_env(spec) is None
    assert prune() == [] and not log.exists(), "prune clears a failed creation's log"


@pytest.mark.e2e
@pytest.mark.creates_env
def test_wrong_flavour_is_caught_and_removed(store):
    # pip config here offers only the CPU wheel of torch 2.13 (find-links); asking for
    # CUDA 12.6 from a missing index makes pip install it: kbuild must refuse that torch.
    spec = EnvSpec((2, 13), "cu126")
    with pytest.raises(EnvironmentCreateError) as info:
        ensure_env(spec, index=NO_INDEX)
    message = info.value.message
    if "it installed torch" not in message:
        pytest.skip(f"pip found no torch 2.13 wheel at all here, so there is no wrong flavour to catch: {message}")
    assert "\n" not in message and "torch==2.13.*" in message and NO_INDEX in message
    assert "it installed torch 2.13.0+cpu (CPU), not torch 2.13 (CUDA 12.6)" in message
    assert "--torch-index" in message
    assert not (store / spec.key).exists() and find_env(spec) is None


@pytest.mark.e2e
@pytest.mark.creates_env
def test_ctrl_c_removes_the_half_made_env(store):
    script = (
        # Ctrl-C as in a terminal, even when the test run itself ignores SIGINT (a shell's
        # background job does, and its children inherit that).
        "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from kernel_builder.environments.store import EnvSpec, ensure_env\n"
        "try:\n    ensure_env(EnvSpec((2, 13), 'cpu'))\n"
        "except KeyboardInterrupt:\n    raise SystemExit(130)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env=dict(os.environ))
    log = store / f"{CPU_213.key}.log"
    deadline = time.monotonic() + 120
    while not (log.exists() and "-m pip install" in log.read_text()):
        assert proc.poll() is None and time.monotonic() < deadline, "creation never reached pip"
        time.sleep(0.1)
    time.sleep(1.0)  # pip is now busy installing into the new venv
    assert (store / CPU_213.key).is_dir()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130, "KeyboardInterrupt must reach the caller"
    assert not (store / CPU_213.key).exists()
    assert find_env(CPU_213) is None


def test_folder_without_marker_is_invisible_and_pruned(store):
    # What a kbuild killed mid-creation (SIGKILL, power loss) leaves: a venv, no marker.
    half = _borrowed_env(store, CPU_213.key, CPU_VENV, marker=False)
    (store / f"{CPU_213.key}.log").write_text("$ python -m pip install 'torch==2.13.*'\n")
    assert find_env(CPU_213) is None
    [listed] = list_envs()
    assert not listed.complete and listed.torch_version is None and listed.last_used is None
    mine = store / "notes"  # not an env kbuild made: never touched
    mine.mkdir()
    [removed] = prune()
    assert removed.key == CPU_213.key and not removed.complete
    assert not half.exists() and not (store / f"{CPU_213.key}.log").exists()
    assert (CPU_VENV / "bin" / "python").exists(), "prune unlinks symlinks, never follows them"
    assert prune(all=True) == [] and mine.is_dir()


def test_cpu_spec_takes_any_flavour_but_prefers_cpu(store):
    optional_module("torch")
    other = _borrowed_env(store, "torch213-cu130", CPU_VENV)  # marker says cu130, torch is CPU
    assert find_env(EnvSpec((2, 13), "cu130")) is None, "the probe, not the folder name, decides"
    assert find_env(CPU_213).python == str(other / "bin" / "python")
    exact = _borrowed_env(store, CPU_213.key, CPU_VENV)
    assert find_env(CPU_213).python == str(exact / "bin" / "python")


def test_prune_older_than_and_all(store):
    optional_module("torch")
    _borrowed_env(store, CPU_213.key, CPU_VENV)
    assert find_env(CPU_213) is not None  # marks it used now
    assert prune(older_than_days=1) == []
    old = time.time() - 3 * 86400
    os.utime(store / CPU_213.key / ".kbuild-last-used", (old, old))
    assert [e.key for e in prune(older_than_days=2)] == [CPU_213.key]
    _borrowed_env(store, "torch213-cu130", CPU_VENV)
    assert [e.key for e in prune(all=True)] == ["torch213-cu130"]


# -- the command line -----------------------------------------------------------------------
def test_cli_list_and_prune_empty_store():
    result = runner.invoke(env_app, ["list", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout) == []
    result = runner.invoke(env_app, ["prune"])
    assert result.exit_code == 0 and "nothing to remove" in result.stdout


def test_cli_list_table_and_prune_json(store):
    _borrowed_env(store, CPU_213.key, CPU_VENV, marker=False)
    result = runner.invoke(env_app, ["list"])
    assert result.exit_code == 0 and CPU_213.key in result.stdout and "incomplete" in result.stdout
    result = runner.invoke(env_app, ["prune", "--json"])
    assert result.exit_code == 0
    assert [row["key"] for row in json.loads(result.stdout)] == [CPU_213.key]


def test_cli_create_bad_name_is_one_line_error():
    result = runner.invoke(env_app, ["create", "torch214-nonsense"])
    assert result.exit_code != 0
    assert isinstance(result.exception, VariantError)  # cli.main prints it as one line
    assert "\n" not in result.exception.message and "'torch214-nonsense'" in result.exception.message
    result = runner.invoke(env_app, ["prune", "torch299-cpu"])
    assert result.exit_code != 0 and isinstance(result.exception, KbuildError)


@pytest.mark.e2e
def test_kbuild_env_create_bad_name_via_the_real_cli():
    result = subprocess.run(
        [sys.executable, "-m", "kernel_builder.cli", "env", "create", "torch214-nonsense"],
        cwd=REPO, capture_output=True, text=True, check=False,
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0 and result.stderr.startswith("kbuild: error:")


def test_wheel_compute_reads_the_flavour_of_a_torch_wheel():
    from kernel_builder.environments.store import wheel_compute

    assert wheel_compute({"version": "2.13.0+cpu"}, (2, 13)) == "cpu"
    assert wheel_compute({"version": "2.12.1+cu126"}, (2, 12)) == "cu126"
    assert wheel_compute({"version": "2.13.0+rocm7.1"}, (2, 13)) == "rocm71"
    cuda = {"version": "2.14.1", "requires_dist": ['nvidia-nccl-cu13==2.30.7; platform_system == "Linux"']}
    assert wheel_compute(cuda, (2, 14)) == "cu130"  # PyPI's own flavour of 2.14
    assert wheel_compute({"version": "2.14.1", "requires_dist": ["filelock"]}, (2, 14)) == "cpu"


@pytest.fixture
def pip_sources(tmp_path, monkeypatch):
    """pip's configured sources as on a machine with a wheelhouse: find-links holding torch
    2.13.0+cpu, an index holding PyPI's CUDA 13.0 build of 2.13.0 (plain version, nvidia-*
    requirements). Returns a function that fills the index with PyPI's build."""
    from kernel_builder.environments import download_cost

    wheelhouse, simple = tmp_path / "wheelhouse", tmp_path / "simple"
    tiny_wheel(wheelhouse, "torch", "2.13.0+cpu", ("filelock",))
    tiny_wheel(wheelhouse, "filelock", "3.20.0")
    simple.mkdir()
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # this machine's own pip config stays out
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheelhouse))
    monkeypatch.setenv("PIP_INDEX_URL", simple.as_uri())
    download_cost._dry_run.cache_clear()

    def publish_pypi_build() -> None:
        for project, version, requires in (("torch", "2.13.0", ('nvidia-nccl-cu13==2.29.7; platform_system == "Linux"',)),
                                           ("nvidia-nccl-cu13", "2.29.7", ())):
            tiny_wheel(simple / project, project, version, requires)
            write_index_page(simple / project)
        download_cost._dry_run.cache_clear()

    yield publish_pypi_build
    download_cost._dry_run.cache_clear()


def test_a_wheelhouse_build_of_another_flavour_is_stepped_over(store, pip_sources):
    """pip ranks 2.13.0+cpu above PyPI's plain 2.13.0, so `torch==2.13.*` alone would install
    the CPU build: kbuild excludes that release by name and pip falls through to PyPI's
    CUDA 13.0 build (the variant is buildable, not skipped)."""
    from kernel_builder.environments import store as envstore

    pip_sources()
    spec = EnvSpec((2, 13), "cu130")
    assert envstore.narrowed_requirement(spec) == "torch==2.13.*,!=2.13.0+cpu"
    assert envstore._offered_compute(spec) == "cu130"
    assert envstore.unservable_reason(spec) is None
    cost = envstore.creation_cost(spec)
    assert cost is not None and [(d.name, d.version) for d in cost.downloads] == [
        ("torch", "2.13.0"), ("nvidia-nccl-cu13", "2.29.7")]
    # A CPU spec takes any flavour, and a named index is asked as it is: no exclusion.
    assert envstore.narrowed_requirement(EnvSpec((2, 13), "cpu")) == "torch==2.13.*"
    assert envstore.narrowed_requirement(spec, index=NO_INDEX) == "torch==2.13.*"


def test_an_index_that_offers_another_flavour_is_skipped_before_any_install(store, pip_sources):
    """Where pip's sources hold no other torch 2.13 than the CPU build, torch213-cu130 is
    skipped with the reason before any install, and the answer is remembered; asking for it
    by name forgets it."""
    from kernel_builder.environments import store as envstore

    spec = EnvSpec((2, 13), "cu130")
    assert envstore.narrowed_requirement(spec) == "torch==2.13.*"  # nothing left to fall through to
    assert envstore._offered_compute(spec) == "cpu"
    reason = envstore.unservable_reason(spec)
    assert reason is not None and "pip's configured index serves no torch 2.13 (CUDA 13.0)" in reason
    assert "kbuild env create torch213-cu130" in reason
    assert (store / "torch213-cu130.unservable.json").is_file()
    envstore.forget_unservable(spec)
    assert not (store / "torch213-cu130.unservable.json").exists()
    # Another index may serve it: the record holds for the index it was made for only.
    envstore._remember_unservable(spec, None, "torch 2.13 (CPU)")
    assert envstore.unservable_reason(spec, index="https://download.pytorch.org/whl/cu130") is None


def test_pip_reason_names_the_error_or_the_crash():
    from kernel_builder.environments.pip_run import pip_reason

    missing = "ERROR: Could not find a version that satisfies the requirement foo\nERROR: No matching distribution found for foo\n"
    assert pip_reason(missing) == "ERROR: No matching distribution found for foo"
    # pip's own crash prints "ERROR: Exception:" and a traceback: the reason is its last line.
    crash = "ERROR: Exception:\nTraceback (most recent call last):\n  File \"x.py\"\nOSError: [Errno 28] No space left on device\n"
    assert pip_reason(crash) == "pip crashed: OSError: [Errno 28] No space left on device"


class _StallingIndex:
    """A loopback index serving one fake torch 2.13.9 wheel: whole to the first request
    (kbuild's dry run), endless to the next (the install hangs in pip's download)."""

    METADATA = b"Metadata-Version: 2.1\nName: torch\nVersion: 2.13.9\n"
    WHEEL = "torch-2.13.9-py3-none-any.whl"

    def __enter__(self):
        import http.server
        import io
        import threading
        import zipfile

        index = self
        self.downloading = threading.Event()
        self.stop = threading.Event()
        wheel = io.BytesIO()
        with zipfile.ZipFile(wheel, "w") as z:
            z.writestr("torch/__init__.py", "")
            z.writestr("torch-2.13.9.dist-info/METADATA", self.METADATA)
            z.writestr("torch-2.13.9.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
            z.writestr("torch-2.13.9.dist-info/RECORD", "")
        wheel_bytes, served = wheel.getvalue(), []
        page = f'<html><body><a href="/files/{self.WHEEL}">{self.WHEEL}</a></body></html>'.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path.rstrip("/").endswith("/simple/torch"):
                    body, kind = page, "text/html"
                elif self.path.endswith(".whl") and not served:
                    served.append(self.path)
                    body, kind = wheel_bytes, "application/octet-stream"
                elif self.path.endswith(".whl"):
                    self.send_response(200)
                    self.send_header("Content-Length", str(10**9))
                    self.end_headers()
                    index.downloading.set()
                    while not index.stop.wait(0.2):
                        try:
                            self.wfile.write(b"\0" * 1024)
                        except OSError:
                            return
                    return
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Cache-Control", "no-store")  # the install must ask again
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://builder:PIPs3cr3t@127.0.0.1:{self.server.server_address[1]}/simple/"

    def __exit__(self, *exc):
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


def _processes_naming(text: str) -> dict[int, str]:
    """pid -> command line of the live processes whose command line holds `text`."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next(line for line in (entry / "status").read_text().splitlines() if line.startswith("State:"))
        except (OSError, StopIteration):
            continue
        if text in cmdline and "Z" not in state.split()[1]:
            found[int(entry.name)] = cmdline
    return found


@pytest.mark.e2e
@pytest.mark.creates_env
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_kbuild_takes_its_pip_along_and_no_password_shows(store, tmp_path):
    """SIGKILL of a kbuild creating an environment ends its pip too; the index password is
    in no process argument, message or log, and the half-made environment is never used."""
    links = tmp_path / "no-wheels"  # pip's configured find-links would offer the real torch 2.13
    links.mkdir()
    output = tmp_path / "kbuild.out"
    with _StallingIndex() as url, output.open("wb") as out:
        kbuild = subprocess.Popen(
            [sys.executable, "-m", "kernel_builder.cli", "env", "create", CPU_213.key, "--torch-index", url],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, PIP_FIND_LINKS=str(links)),
        )
        try:
            deadline = time.monotonic() + 180
            env_folder = str(store / CPU_213.key)
            while not (pips := {p: c for p, c in _processes_naming(env_folder).items() if "-m pip install" in c}):
                assert kbuild.poll() is None, output.read_text()
                assert time.monotonic() < deadline, "creation never reached pip install"
                time.sleep(0.2)
            time.sleep(2.0)  # pip is now in its (endless) download
            assert all("PIPs3cr3t" not in c for c in _processes_naming("pip").values()), "password in pip's arguments"
            kbuild.kill()
            kbuild.wait(timeout=30)
            deadline = time.monotonic() + 15
            while set(pips) & set(_processes_naming(env_folder)):
                assert time.monotonic() < deadline, f"pip outlived the killed kbuild: {pips}"
                time.sleep(0.2)
        finally:
            if kbuild.poll() is None:
                kbuild.kill()
            for pid in _processes_naming(str(store / CPU_213.key)):
                os.kill(pid, signal.SIGKILL)  # only the old code's orphans: this test's own pip
    assert (store / CPU_213.key).is_dir() and not (store / CPU_213.key / MARKER).exists()
    assert find_env(CPU_213) is None, "a half-made environment is never used"
    assert [e.complete for e in list_envs()] == [False]
    log = (store / f"{CPU_213.key}.log").read_text()
    shown = output.read_text()
    assert "-m pip install" in log and "PIPs3cr3t" not in log
    assert "creating build environment" in shown and "http://***@127.0.0.1" in shown and "PIPs3cr3t" not in shown
