"""`kbuild env ...`: list, create and prune the managed build environments (kernel_builder.environments.managed)."""

from __future__ import annotations

from typing import List, Optional

import typer

from kernel_builder.cli.output import console as _console
from kernel_builder.cli.output import new_app, print_json
from kernel_builder.formatting import human_size

env_app = new_app("Managed build environments: one virtual environment per torch version and compute, "
                  "created on first use.")




def _when(moment) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M") if moment else "-"


@env_app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="Print the environments as JSON.")) -> None:
    """List the managed build environments, their torch, size and when they were last used."""
    from rich.markup import escape
    from rich.table import Table

    from kernel_builder.environments.managed import inventory

    found = inventory()
    envs = found.envs
    if as_json:
        print_json(found.to_json())
        return
    _print_overlays(found.overlays)
    _print_headers(found.headers)
    if not envs:
        _console().print(f"no build environments in {escape(str(found.root()))}")
        return
    table = Table(title=f"build environments in {escape(str(found.root()))}")
    for column in ("key", "torch", "compute", "size", "last used"):
        table.add_column(column, no_wrap=True)
    table.add_column("path", overflow="fold")
    for e in envs:
        torch = escape(e.torch_version) if e.complete and e.torch_version else "[red]incomplete[/]"
        compute = e.spec.compute if e.spec else "?"
        table.add_row(escape(e.key), torch, compute, human_size(e.size_bytes), _when(e.last_used), escape(str(e.path)))
    _console().print(table)


def _print_overlays(overlays) -> None:
    """Runtime overlays: a kernel's import-time needs (triton, einops, pytest for `kbuild test`)
    installed on top of a build environment, made by `kbuild check` and `kbuild test`."""
    if not overlays:
        return
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="runtime overlays (kernel needs on top of a build environment)")
    for column in ("key", "packages", "size", "last used"):
        table.add_column(column, no_wrap=column != "packages")
    table.add_column("base", overflow="fold")
    for o in overlays:
        packages = escape(" ".join(o.packages)) if o.complete else "[red]incomplete or base gone[/]"
        table.add_row(escape(o.key), packages, human_size(o.size_bytes), _when(o.last_used), escape(o.base or "?"))
    _console().print(table)


def _print_headers(headers) -> None:
    """The CUTLASS releases unpacked for units' `depends = ["cutlass_X_Y"]`."""
    if not headers:
        return
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="CUTLASS headers (for depends = [\"cutlass_X_Y\"])")
    for column in ("key", "version", "size", "last used"):
        table.add_column(column, no_wrap=True)
    table.add_column("path", overflow="fold")
    for h in headers:
        version = escape(h.version) if h.complete and h.version else "[red]incomplete[/]"
        table.add_row(escape(h.key), version, human_size(h.size_bytes), _when(h.last_used), escape(str(h.path)))
    _console().print(table)


@env_app.command()
def create(
    name: str = typer.Argument(
        ..., help="A variant (torch214-cxx11-cu130-x86_64-linux) or an environment key (torch214-cu130)."
    ),
    torch_index: Optional[str] = typer.Option(
        None,
        "--torch-index",
        help="Install torch from this index URL (default: $KBUILD_TORCH_INDEX, else pip's own index "
        "or PyTorch's index for the flavour).",
    ),
) -> None:
    """Create (or reuse) the build environment for a variant and say where it is."""
    from rich.markup import escape

    from kernel_builder.environments.managed import create as create_env

    progress = _console(stderr=True)
    spec, env = create_env(name, torch_index, say=lambda line: progress.print(escape(line)))
    _console().print(f"{spec.key}: torch {escape(env.torch_version)} in {escape(env.python)}")


@env_app.command()
def prune(
    keys: Optional[List[str]] = typer.Argument(None, help="Remove these environments, overlays or CUTLASS folders (keys as `kbuild env list` shows)."),
    remove_all: bool = typer.Option(False, "--all", help="Remove every managed environment."),
    older_than: Optional[float] = typer.Option(None, "--older-than", help="Remove those unused for more than DAYS.", metavar="DAYS"),
    as_json: bool = typer.Option(False, "--json", help="Print what was removed as JSON."),
) -> None:
    """Remove build environments, runtime overlays and CUTLASS header folders; incomplete ones
    (interrupted creations) and overlays whose build environment is gone always go."""
    from rich.markup import escape

    from kernel_builder.environments.managed import prune as prune_all

    removed = prune_all(tuple(keys or ()), all=remove_all, older_than_days=older_than)
    if as_json:
        print_json([e.to_json() for e in removed])
        return
    console = _console()
    if not removed:
        console.print("nothing to remove")
        return
    for e in removed:
        console.print(f"removed {escape(e.key)}{'' if e.complete else ' (incomplete)'}  {human_size(e.size_bytes)}")
    console.print(f"freed {human_size(sum(e.size_bytes for e in removed))}")
