"""`kbuild check [BUILD_DIR]`: the checks every build runs, on variants already built."""

from __future__ import annotations

from pathlib import Path

import typer

from kernel_builder.cli.output import console as _console
from kernel_builder.cli.output import print_json


def check(
    build_dir: Path = typer.Argument(Path("."), help="A kernel repo (checks every variant in its build/), a build/ folder or one variant folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
    import_check: bool = typer.Option(
        True, "--import-check/--no-import-check",
        help="Import each variant in its environment (an aarch64 variant's runs under emulation: a minute or more); "
        "the other checks always run.",
    ),
) -> None:
    """Check built variants: manylinux_2_28 symbol versions, NEEDED libraries, metadata and digests, stable-ABI symbols, import in their environment."""
    from rich.markup import escape
    from rich.table import Table

    from kernel_builder.checks.variant_checks import FAILED, OK, WARNING, check_build

    reports = check_build(build_dir, import_check=import_check)
    if as_json:
        print_json([r.to_json() for r in reports])
    else:
        console = _console()
        style = {OK: "[green]ok[/]", FAILED: "[red]FAILED[/]", WARNING: "[yellow]warning[/]"}
        for report in reports:
            table = Table(title=escape(str(report.folder)), title_justify="left")
            table.add_column("check")
            table.add_column("status")
            table.add_column("finding")
            for r in report.results:
                finding = "\n".join(r.findings) if r.findings else r.detail
                table.add_row(r.check, style.get(r.status, r.status), escape(finding))
            console.print(table)
    if not all(r.ok for r in reports):
        raise typer.Exit(1)
