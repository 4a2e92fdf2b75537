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
# are reused across tests, work trees are keyed by each test's own kernel folder.
os.environ["KBUILD_CACHE_DIR"] = tempfile.mkdtemp(prefix="kbuild-test-cache-")
# Managed build environments (GBs and minutes of pip each) are made once per session and
# shared by every test, those that give kbuild a cache of its own included.
os.environ.setdefault("KBUILD_ENVS_DIR", os.path.join(os.environ["KBUILD_CACHE_DIR"], "venvs"))


def optional_module(module: str):
    """`module`, which kbuild's test extra installs, or a skip that says so: at a test module's
    top the whole module skips, so `pip install -e .` alone collects without errors. Ask for
    `docker.errors`, not `docker`: the checkout's docker/ folder imports as a namespace package."""
    package = module.split(".")[0]
    return pytest.importorskip(module, reason=f"needs the {package} package, from the test extra: pip install -e '.[test]'")


def pytest_sessionfinish(session, exitstatus):
    """The session's kbuild cache (work trees, and managed environments unless
    KBUILD_ENVS_DIR points elsewhere: several GB) goes with the session."""
    shutil.rmtree(os.environ["KBUILD_CACHE_DIR"], ignore_errors=True)


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
def built_example(tmp_path_factory):
    """`kbuild build <copy of examples/<name>>`, as the README runs it, once per session:
    every backend this machine can build or check. The copy keeps examples/ free of build
    output, and of a half-written build/ when a session is interrupted."""
    built: dict[str, BuiltExample] = {}

    def build(name: str) -> BuiltExample:
        if name not in built:
            root = copy_example(name, tmp_path_factory.mktemp("examples"))
            result = kbuild("build", str(root), "--json", check=True)
            rows = {row["backend"]: row for row in json.loads(result.stdout)["jobs"]}
            built[name] = BuiltExample(root, rows, result.stderr)
        return built[name]

    return build


@pytest.fixture(scope="session")
def relu_cpu(tmp_path_factory) -> Path:
    """A copy of examples/relu with its torch 2.13 CPU variant built, once per session, for
    the tests that only read that build (the runtime's loaders, confinement, interop)."""
    root = copy_example("relu", tmp_path_factory.mktemp("relu-cpu"))
    kbuild("build", str(root), "--variant", "torch213-cxx11-cpu-x86_64-linux", check=True)
    return root


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
        target = Path(os.environ["KBUILD_CACHE_DIR"]) / f"kernels-{version}"
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
             "--target", str(target), f"kernels=={version}"],
            capture_output=True, text=True, check=False,
        )
        lines = [line for line in done.stderr.splitlines() if line.strip() and "WARNING" not in line]
        _OLD_KERNELS[version] = target if done.returncode == 0 else (lines or ["pip failed"])[-1]
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
