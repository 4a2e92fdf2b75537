"""The README's quick-start install is enough for the README's next steps: in a fresh venv
with exactly that install (from this checkout, not editable), kbuild builds a kernel,
publishes it to the test Hub over HTTP, and the `kernels` package it installed loads it.
(Once, `kbuild publish` failed after the quick start: huggingface_hub was not a dependency.)"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from git_repo import new_repo
from hub_fixture import hub_env

pytestmark = pytest.mark.e2e


def quick_start_install() -> list[str]:
    """The arguments of the quick start's `pip install`, as the README spells them."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the quick start has a bash block"
    command = block.group(1).split("&&")[0].strip()
    words = shlex.split(command)
    assert words[:2] == ["pip", "install"], command
    return words[2:]


def run(*args: str | Path, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, check=False,
                          env=dict(os.environ, **(env or {})))


def _not_sources(folder: str, names: list[str]) -> set[str]:
    """What the copy of the checkout leaves out: venvs, caches and build outputs (a build/ beside
    a build.toml or at the top)."""
    skipped = {".git", ".venv", ".ci-venv", "__pycache__", ".pytest_cache"} | {n for n in names if n.endswith(".egg-info")}
    if "build" in names and (Path(folder) == REPO or "build.toml" in names):
        skipped.add("build")
    return skipped & set(names)


def test_the_quick_start_install_builds_publishes_and_loads(tmp_path, hub):
    requirements = quick_start_install()
    assert requirements and requirements[0].startswith(".["), requirements  # installs this checkout
    venv = tmp_path / "venv"
    assert run(sys.executable, "-m", "venv", venv).returncode == 0
    # Only the README's words, run from the checkout (a copy, so no build artefact lands in it).
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO, checkout, ignore=_not_sources)
    installed = run(venv / "bin" / "pip", "install", "-q", *requirements, cwd=checkout)
    assert installed.returncode == 0, installed.stderr[-3000:]
    # Nothing of the test venv leaks in: the fresh venv's own kbuild and python.
    clean = {"PYTHONPATH": "", "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}

    kernel = tmp_path / "fused"
    shutil.copytree(REPO / "tests" / "fixtures" / "fused", kernel, ignore=shutil.ignore_patterns("build", "__pycache__"))
    (kernel / ".gitignore").write_text("build/\n__pycache__/\n")
    new_repo(kernel)
    built = run(venv / "bin" / "kbuild", "build", kernel, env=clean)
    assert built.returncode == 0, built.stderr[-3000:]

    published = run(venv / "bin" / "kbuild", "publish", kernel, "--tag", "v1.0.0", "--repo-id", "me/fused",
                    env={**clean, **hub_env(hub, tmp_path)})
    assert published.returncode == 0, published.stderr[-3000:]
    assert "published me/fused tag v1.0.0" in published.stderr

    load = ("import kernels, pathlib, sys\n"
            "k = kernels.get_kernel('me/fused', version=1, trust_remote_code=True)\n"
            "print('loaded', k.__name__, kernels.__version__)\n")
    loaded = run(venv / "bin" / "python", "-c", load, env={**clean, **hub_env(hub, tmp_path, token=None)})
    assert loaded.returncode == 0 and loaded.stdout.startswith("loaded"), loaded.stderr[-3000:]
    assert "NumPy" not in loaded.stderr, "torch warns without numpy: the torch extra brings it"
