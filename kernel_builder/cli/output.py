"""What every `kbuild` command module shares: the rich console they print with, the one
way `--json` output is written, and how a command group (`kbuild env ...`) is made."""

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


def sub_app(help: str) -> typer.Typer:  # noqa: A002 - typer's own name for it
    return typer.Typer(help=help, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
