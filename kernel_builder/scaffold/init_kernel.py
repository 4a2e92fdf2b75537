"""`kbuild init NAME`: a new kernel repo (kernel_builder.scaffold.new_kernel), made a git
repository with a first commit (first_commit), and a word on a CI workflow it could not get."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from kernel_builder.errors import UsageError
from kernel_builder.scaffold.first_commit import make_first_commit
from kernel_builder.scaffold.kbuild_source import ci_requirement
from kernel_builder.scaffold.new_kernel import scaffold


def init_kernel(name: str, backends: str, git: bool = True, say: Callable[[str], None] = lambda line: None) -> list[Path]:
    """Scaffold the kernel `name` (a folder path; the kernel is named after its last part)
    for the comma-separated `backends`; `git`: commit it. `say` hears what was made, in order;
    the files written are returned."""
    chosen = [b.strip() for b in backends.split(",") if b.strip()]
    kernel = name.rstrip("/").split("/")[-1]
    written = scaffold(Path(name), kernel, chosen)
    say(f"created {name}/ ({len(written)} files); next: kbuild build {name}")
    if not any(p.name == "kbuild.yml" for p in written):
        why = _why_no_workflow()
        if why:
            say(why)
    if git:
        say(make_first_commit(Path(name), kernel))
    return written


def _why_no_workflow() -> str | None:
    """init writes no CI workflow when CI could not install this kbuild: why, and how to get
    one (a workflow skipped for a Metal-only kernel needs no note)."""
    try:
        ci_requirement()
    except UsageError as e:
        return f"note: no .github/workflows/kbuild.yml written: {e.message} to `kbuild ci github`"
    return None
