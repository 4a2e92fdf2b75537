"""What every `kbuild` command module shares: the rich console they print with, the one
way `--json` output is written, how a table is printed whole, and how the app and a command
group (`kbuild env ...`) are made."""

from __future__ import annotations

import json
import sys

import typer


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def print_json(data) -> None:
    """`--json` output: one indented document on stdout, nothing else there."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def print_table(console, table) -> None:
    """`table` with every variant name whole, whatever the width. Rich keeps a cell's words
    whole while the table gets its minimum width, and cuts them short below it; then, where
    nothing wraps lines (a pipe, a CI log), the table is printed that wide, and on a narrow
    terminal as one line per row, which the terminal wraps."""
    from rich.console import Console
    from rich.measure import Measurement

    from rich.cells import cell_len

    # Rich shares a short width out over columns by their ratios, and may then cut the first
    # column's words although the table's minimum fits: hold that column at its widest name.
    names = table.columns[0]
    names.min_width = max([cell_len(str(cell)) for cell in names.cells] + [names.min_width or 0])
    needed = Measurement.get(console, console.options.update_width(1 << 16), table).minimum
    if needed <= console.width:
        console.print(table)
    elif not console.is_terminal:
        Console(file=console.file, width=needed, highlight=False, soft_wrap=True, color_system=console.color_system).print(table)
    else:
        if table.title:
            console.print(table.title)
        for first, *rest in zip(*(column.cells for column in table.columns)):
            console.print(f"{first}: " + ", ".join(str(cell) for cell in rest if str(cell)))


class _HelpGroup(typer.core.TyperGroup):
    """Lists a group's commands with the first paragraph of each one's help whole, wrapped to
    the width (click cuts it short with '...' to fit one line)."""

    def format_commands(self, ctx, formatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.short_help or " ".join((command.help or "").strip().split("\n\n")[0].split())))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def new_app(help: str, name: str | None = None) -> typer.Typer:  # noqa: A002 - typer's own name for it
    """A Typer app (`kbuild`, or a group such as `kbuild env`) with click's plain help: at any
    width (80 columns, a pipe) option names stay whole and flags show no type, where rich's
    help table cuts names short (`--compiler-cache-…`) and calls every flag `<bool>`."""
    return typer.Typer(name=name, help=help, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                       rich_markup_mode=None, cls=_HelpGroup)
