"""`kbuild migrate [KERNEL_DIR] [--check]`: rewrite build.toml to edition 6 (kernel_builder.kernel.migrate)."""

from __future__ import annotations

from pathlib import Path

import typer

from kernel_builder.cli.output import console as _console


def migrate(
    kernel_dir: Path = typer.Argument(Path("."), help="The kernel repo holding build.toml (default: here)."),
    check: bool = typer.Option(False, "--check", help="Write nothing; exit 1 if a migration is needed."),
) -> None:
    """Rewrite an edition-less or edition-5 build.toml to edition 6 (`language = "cpp-cuda"` instead
    of `backend = "cuda"`), keeping comments and formatting."""
    from rich.markup import escape

    from kernel_builder.kernel.migrate import migrate as run_migration

    result = run_migration(kernel_dir, check=check)
    console = _console()
    old = "no edition" if result.old_edition is None else f"edition {result.old_edition}"
    if not result.changed:
        console.print(escape(f"{result.path}: already edition 6"))
    elif check:
        console.print(escape(f"{result.path}: {old}, needs migrating to edition 6 (run `kbuild migrate`)"))
        raise typer.Exit(1)
    else:
        console.print(escape(f"{result.path}: migrated from {old} to edition 6"))

