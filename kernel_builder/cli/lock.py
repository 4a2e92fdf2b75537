"""`kbuild lock [PROJECT_DIR]`: write kernels.lock for the kernels a project declares in
pyproject.toml's [tool.kernels.dependencies] (kernel_builder.runtime.lock_writer)."""

from __future__ import annotations

from pathlib import Path

import typer

from kernel_builder.cli.output import console as _console


def lock(
    project_dir: Path = typer.Argument(Path("."), help="The project folder holding pyproject.toml (default: here)."),
    fmt: str = typer.Option(
        "kbuild",
        "--format",
        help="kbuild: kbuild's lock format, with a hash per build variant that loading verifies. "
        "kernels: kernels 0.17's shape (commit only), for `kernels download`.",
    ),
) -> None:
    """Pin each kernel that pyproject.toml declares (the tool.kernels.dependencies table) to a
    commit and hash its build variants into PROJECT_DIR/kernels.lock. Load with
    get_kernel(..., lockfile=...) to verify them."""
    from rich.markup import escape

    from kernel_builder.runtime.lock_writer import lock_project

    path, entries = lock_project(project_dir, fmt=fmt)
    console = _console()
    for e in entries:
        asked = f"version {e.requested}" if isinstance(e.requested, int) else f"'{e.requested}'"
        console.print(escape(f"locked {e.repo_id} ({asked}) at {e.sha[:7]}, {len(e.variants or {})} variants"))
    console.print(escape(f"wrote {path}"))

