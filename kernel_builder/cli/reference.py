"""The CLI reference page (docs/reference/cli.md), rendered from the Typer app itself so it can
never drift from `kbuild --help`: every command and group, its help, usage, and each argument
and option as `--help` shows it. The docs build calls it (docs/hooks/generated_pages.py)."""

from __future__ import annotations

from collections.abc import Iterator

import typer

HEADER = """# Command reference

Generated from `kbuild`'s own command definitions when the docs are built: the same text as
`kbuild COMMAND --help` (each also takes `--help`). Every command prints a one-line `kbuild: error: ...` and exits
non-zero on a mistake; malformed build files exit with code 2.
"""


def commands(app: typer.Typer) -> Iterator[tuple[str, object, typer.Context]]:
    """Every command and group under the app, depth first, as ("kbuild build", command, its context)."""

    def walk(path: str, command, parent: typer.Context | None):
        ctx = typer.Context(command, info_name=path.rsplit(" ", 1)[-1], parent=parent)
        yield path, command, ctx
        for name in _subcommands(command, ctx):
            yield from walk(f"{path} {name}", command.get_command(ctx, name), ctx)

    yield from walk("kbuild", typer.main.get_command(app), None)


def markdown(app: typer.Typer) -> str:
    return "\n".join([HEADER, *(_command(path, command, ctx) for path, command, ctx in commands(app))])


def _subcommands(command, ctx: typer.Context) -> list[str]:
    return command.list_commands(ctx) if hasattr(command, "list_commands") else []


def _command(path: str, command, ctx: typer.Context) -> str:
    lines = [f"## `{path}`", ""]
    if command.help:
        lines += [_plain(command.help), ""]
    lines += ["```", " ".join([path, *command.collect_usage_pieces(ctx)]), "```", ""]
    subcommands = _subcommands(command, ctx)
    if subcommands:
        links = (f"[`{path} {name}`](#{_anchor(f'{path} {name}')})" for name in subcommands)
        lines += ["Commands: " + ", ".join(links) + ".", ""]
    records = [param.get_help_record(ctx) for param in command.get_params(ctx)
               if param.name != "help" and not getattr(param, "hidden", False)]
    rows = [f"| `{_cell(names)}` | {_cell(text)} |" for names, text in filter(None, records)]
    if rows:
        lines += ["| argument or option | what |", "| --- | --- |", *rows, ""]
    return "\n".join(lines)


def _plain(text: str) -> str:
    """Help text as Markdown: click's \\b (keep this paragraph's lines) markers dropped."""
    return "\n".join(line for line in text.strip().splitlines() if line.strip() != "\b")


def _cell(text: str) -> str:
    """One table cell: one line, and a `|` that does not end the cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _anchor(title: str) -> str:
    """The id mkdocs' toc extension gives the heading `` `title` ``."""
    return "-".join(title.lower().split())
