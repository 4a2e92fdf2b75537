"""`kbuild init` (a new kernel repo) and `kbuild demo` (scaffold, build, load, call)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kernel_builder.backend_facts import BACKENDS
from kernel_builder.cli.output import console as _console


def init(
    name: str = typer.Argument(..., help="Kernel name, kebab-case (e.g. my-kernel); also the folder created."),
    backends: str = typer.Option("cpu", "--backends", "-b", help=f"Comma-separated: {','.join(BACKENDS)}."),
    no_git: bool = typer.Option(False, "--no-git", help="Do not make the folder a git repository with a first commit."),
) -> None:
    """Scaffold a kernel repo with a working example op, tests and CI-ready layout, as a git repo."""
    from rich.markup import escape

    from kernel_builder.scaffold.init_kernel import init_kernel

    console = _console()
    init_kernel(name, backends, git=not no_git, say=lambda line: console.print(escape(line)))


def demo(
    workdir: Optional[Path] = typer.Option(
        None, "--dir", help="Where to scaffold (default: kbuild's cache, where the next demo finds its build up to date)."
    ),
) -> None:
    """Scaffold, build, load and call the embedded example kernel: a smoke test of kbuild."""
    from rich.markup import escape

    from kernel_builder.runners.progress import progress_for
    from kernel_builder.scaffold.demo import run_demo

    console = _console()
    progress = progress_for(_console(stderr=True), quiet=False)  # the build's, as `kbuild build` shows it
    run_demo(workdir, say=lambda message: console.print(escape(message)), progress=progress)

