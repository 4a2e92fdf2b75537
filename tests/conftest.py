"""Shared test helpers: the real CLI in a subprocess, copies of the examples."""

from __future__ import annotations

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
    """`kbuild build examples/<name>` in place, as the README runs it, once per session:
    every backend this machine can build or check."""
    built: dict[str, BuiltExample] = {}

    def build(name: str) -> BuiltExample:
        if name not in built:
            result = kbuild("build", str(EXAMPLES / name), "--json", check=True)
            rows = {row["backend"]: row for row in json.loads(result.stdout)["jobs"]}
            built[name] = BuiltExample(EXAMPLES / name, rows, result.stderr)
        return built[name]

    return build


def run_example_tests(root: Path) -> subprocess.CompletedProcess:
    """An example's own test suite, in a fresh interpreter, against its build/."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests")],
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
