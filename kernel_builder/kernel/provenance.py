"""Where sources come from: the git commit and dirty flag of a kernel, and of kbuild.

A kernel's dirty flag is about what its build reads (sources.input_files): one of those files
differs from HEAD or is not in HEAD. An edit to its README or tests leaves it clean, as it
leaves its op namespace id (identity.py) unchanged. kbuild's own flag covers its whole checkout.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from kernel_builder.paths import CHECKOUT_DIR

_GITLINK = "160000"  # ls-tree's mode of a submodule


@dataclass(frozen=True)
class GitState:
    commit: str
    dirty: bool


def git_output(cwd: Path, *args: str, stdin: str | None = None) -> str | None:
    """git's stdout in `cwd`, or None when git fails or is not installed."""
    try:
        result = subprocess.run(
            ["git", "-C", str(cwd), *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip("\n") if result.returncode == 0 else None


def _head(folder: Path) -> tuple[Path, str] | None:
    """(top of the work tree, HEAD's commit); None outside a repo or before the first commit."""
    top = git_output(folder, "rev-parse", "--show-toplevel")
    commit = git_output(folder, "rev-parse", "--verify", "-q", "HEAD") if top else None
    return (Path(top).resolve(), commit) if top and commit else None


def git_state(folder: Path, inputs: Sequence[Path] | None = None) -> GitState | None:
    """The git state of `folder` (None outside a repo or before the first commit).

    With `inputs` (files under `folder`), dirty means one of them differs from HEAD or is
    not in it; without, any uncommitted change under `folder` (tracked or untracked)."""
    folder = folder.resolve()
    head = _head(folder)
    if head is None:
        return None
    top, commit = head
    spec = folder.relative_to(top).as_posix()
    if inputs is None:
        dirty = git_output(top, "status", "--porcelain", "--", spec) != ""
    else:
        dirty = _inputs_differ(top, spec, [p.resolve().relative_to(top).as_posix() for p in inputs])
    return GitState(commit=commit, dirty=dirty)


def _inputs_differ(top: Path, spec: str, files: list[str]) -> bool:
    """Whether a file of `files` (relative to `top`, under `spec`) is not as committed at HEAD.

    A file's bytes go through git's clean filters (hash-object, by path) and are compared with
    HEAD's blob, so ignored and untracked inputs count too; a file inside a submodule is clean
    when git status finds that submodule clean."""
    listing = git_output(top, "ls-tree", "-r", "-z", "HEAD", "--", spec)
    if listing is None:
        return True
    blobs: dict[str, str] = {}
    submodules: list[str] = []
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        mode, _, oid = meta.split(" ")
        if mode == _GITLINK:
            submodules.append(path)
        else:
            blobs[path] = oid
    in_submodule = {f for f in files if any(f.startswith(s + "/") for s in submodules)}
    plain = [f for f in files if f not in in_submodule]
    if any(f not in blobs or "\n" in f for f in plain):  # hash-object reads one path per line
        return True
    if plain:
        hashed = git_output(top, "hash-object", "--stdin-paths", stdin="\n".join(plain) + "\n")
        if hashed is None or hashed.split("\n") != [blobs[f] for f in plain]:
            return True
    touched = sorted({s for s in submodules for f in in_submodule if f.startswith(s + "/")})
    return bool(touched) and git_output(top, "status", "--porcelain", "--", *touched) != ""


def kbuild_git_state() -> GitState | None:
    """kbuild's own git state when it runs from a checkout (None for an installed wheel)."""
    if not (CHECKOUT_DIR / ".git").exists():
        return None
    return git_state(CHECKOUT_DIR)
