"""Git for the tests, with one fixed identity so that commits never depend on the machine's
git config: `git(root, ...)` runs a git command in `root`, `new_repo(root)` makes a folder a
repository with everything in it committed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}


def git(root: Path, *args: str | Path) -> str:
    """`git -C root ARGS`, failing the test when git fails; its stdout, stripped."""
    done = subprocess.run(["git", "-C", str(root), *map(str, args)], capture_output=True, text=True, check=False,
                          env=dict(os.environ, **IDENTITY))
    assert done.returncode == 0, f"git {' '.join(map(str, args))} failed in {root}:\n{done.stderr}"
    return done.stdout.strip()


def new_repo(root: Path, message: str = "kernel") -> Path:
    """`root` as a new git repository whose first commit holds every file in it."""
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)
    return root
