"""Where sources come from: git commit, tree hash and dirty flag of a kernel, and of kbuild.

The kernel's op namespace id is the first 7 hex digits of its source tree's git hash, so
two builds of one kernel can be loaded in one process; outside git it is a content hash.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from kernel_builder.paths import CHECKOUT_DIR


@dataclass(frozen=True)
class GitState:
    commit: str
    dirty: bool
    tree: str | None = None  # the tree object of the folder at HEAD


def _git(cwd: Path, *args: str) -> str | None:
    try:
        result = subprocess.run(
            ["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def git_state(folder: Path, exclude: tuple[Path, ...] = ()) -> GitState | None:
    """The git state of `folder` (None outside a repo or before the first commit).

    Dirty means uncommitted changes (tracked or untracked, not ignored) under `folder`,
    other than in `exclude` (the build output)."""
    folder = folder.resolve()
    top = _git(folder, "rev-parse", "--show-toplevel")
    commit = _git(folder, "rev-parse", "--verify", "-q", "HEAD") if top else None
    if not top or not commit:
        return None
    rel = folder.relative_to(Path(top).resolve()).as_posix()
    spec = "." if rel == "." else rel
    tree = _git(Path(top), "rev-parse", "--verify", "-q", f"HEAD:{'' if spec == '.' else spec}")
    pathspec = [spec] + [f":(exclude){p.resolve().relative_to(Path(top).resolve()).as_posix()}" for p in exclude if _inside(p, Path(top))]
    status = _git(Path(top), "status", "--porcelain", "--", *pathspec)
    return GitState(commit=commit, dirty=bool(status) or tree is None, tree=tree)


def _inside(path: Path, top: Path) -> bool:
    try:
        path.resolve().relative_to(top.resolve())
        return True
    except ValueError:
        return False


def kbuild_git_state() -> GitState | None:
    """kbuild's own git state when it runs from a checkout (None for an installed wheel)."""
    if not (CHECKOUT_DIR / ".git").exists():
        return None
    return git_state(CHECKOUT_DIR)
