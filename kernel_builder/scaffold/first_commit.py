"""`kbuild init`'s git repository: `git init` and a first commit of the scaffold.

A build records the commit it was made at (`kbuild publish` needs one), so a kernel repo
that starts as one keeps its first build. Nothing is done inside an existing work tree (the
scaffold is committed there by its owner) or without git; the line returned says so. The
scaffold stands either way: a git failure is reported, not raised.

Without a configured user.name / user.email git refuses to commit; then the commit is made
as kbuild (`-c user.name=... -c user.email=...`, for this commit only) and the line says how
to make it the user's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from kernel_builder.formatting import first_line

FALLBACK_IDENTITY = {"name": "kbuild", "email": "kbuild@localhost"}
# Environment variables git takes each identity field from, before its config.
_IDENTITY_ENV = {"name": ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"), "email": ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL")}


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)


def _missing_identity(root: Path) -> dict[str, str]:
    """The identity fields git has neither from its config nor from the environment."""
    missing = {}
    for field, names in _IDENTITY_ENV.items():
        in_env = all(os.environ.get(n) for n in names) or (field == "email" and os.environ.get("EMAIL"))
        if not in_env and not _git(root, "config", "--get", f"user.{field}").stdout.strip():
            missing[field] = FALLBACK_IDENTITY[field]
    return missing


def _failed(step: str, result: subprocess.CompletedProcess) -> str:
    why = first_line(result.stderr or result.stdout or f"exit {result.returncode}")
    return f"git {step} failed ({why}): the scaffold is not committed"


def make_first_commit(root: Path, name: str) -> str:
    """Make `root` (a fresh scaffold) a git repository holding it in one commit; return
    one line saying what was done, or why not."""
    if shutil.which("git") is None:
        return "git is not installed: no repository made (`kbuild publish` needs the kernel committed to git)"
    inside = _git(root, "rev-parse", "--show-toplevel")
    if inside.returncode == 0:
        return f"{root} is inside the git repository {inside.stdout.strip()}: no new repository made; commit it there"
    for step, args in (("init", ("init", "-q")), ("add", ("add", "-A"))):
        result = _git(root, *args)
        if result.returncode != 0:
            return _failed(step, result)
    missing = _missing_identity(root)
    config = [arg for field, value in missing.items() for arg in ("-c", f"user.{field}={value}")]
    result = _git(root, *config, "commit", "-q", "-m", f"Scaffold {name} with kbuild init")
    if result.returncode != 0:
        return _failed("commit", result)
    commit = _git(root, "rev-parse", "--short", "HEAD").stdout.strip()
    line = f"made a git repository with the scaffold as its first commit ({commit})"
    if missing:
        who = f"{FALLBACK_IDENTITY['name']} <{FALLBACK_IDENTITY['email']}>"
        line += (f", committed as {who} since git has no user.{' or user.'.join(missing)}: set it with "
                 "`git config --global` and run `git commit --amend --reset-author`")
    return line
