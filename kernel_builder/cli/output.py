"""What every `kbuild` command module shares: the rich console they print with, and
sub-command groups (`kbuild env ...`, `kbuild docker ...`) registered once on the app."""

from __future__ import annotations

import typer


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def sub_app(help: str) -> typer.Typer:  # noqa: A002 - typer's own name for it
    return typer.Typer(help=help, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


def register_once(app: typer.Typer, group: typer.Typer, name: str, help: str) -> None:  # noqa: A002
    """Add `group` to `app` as `kbuild NAME ...`, unless it is there already."""
    if not any(registered.typer_instance is group for registered in app.registered_groups):
        app.add_typer(group, name=name, help=help)
