"""`kbuild dev [KERNEL_DIR] [--cuda-arch 9.0] [--watch] [--json] [-- PYTEST_ARGS]`: build this
machine's variant into a development folder and run the kernel's tests against it, once or
on every save (kernel_builder.pipeline.dev_loop)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from kernel_builder.cli.output import console as _console
from kernel_builder.cli.output import print_json


def dev(
    kernel_dir: Path = typer.Argument(Path("."), help="The kernel repo (holding build.toml and tests/)."),
    cuda_arch: Optional[str] = typer.Option(
        None, "--cuda-arch", metavar="X.Y",
        help="A CUDA variant compiles for this architecture only (default: this machine's GPU; without one, the "
        "newest the kernel lists that nvcc compiles for).",
    ),
    watch: bool = typer.Option(False, "--watch", "-w", help="Build and test again on every save of a file the build "
                               "reads or of tests/; Ctrl-C ends it."),
    as_json: bool = typer.Option(False, "--json", help="Print each round as JSON on stdout (one line per round with --watch)."),
    max_runs: Optional[int] = typer.Option(None, "--max-runs", hidden=True, help="With --watch: stop after N rounds."),
    pytest_args: Optional[List[str]] = typer.Argument(None, help="Arguments for pytest, after `--`."),
) -> None:
    """The edit -> build -> test loop: build the variant this machine loads (a CUDA one for one
    architecture) into kbuild's cache, never KERNEL_DIR/build, and run the kernel's tests on it."""
    from rich.markup import escape

    from kernel_builder.pipeline.dev_loop import prepare, run_round, watch as watch_loop
    from kernel_builder.pipeline.options import parse_cuda_arch
    from kernel_builder.settings import positive_count

    console = _console(stderr=True)
    say = lambda message: console.print(escape(message))  # noqa: E731
    positive_count(max_runs, "--max-runs")
    setup = prepare(kernel_dir, parse_cuda_arch(cuda_arch or ()), pytest_args or ())
    if setup.cuda_arch is not None:
        say(f"{setup.manifest.name}: CUDA for {setup.cuda_arch.describe()}")
    last = []

    def one_round() -> None:
        result = run_round(setup, capture=as_json, on_wait=say)
        last[:] = [result]
        if as_json and watch:
            sys.stdout.write(json.dumps(result.to_json()) + "\n")
            sys.stdout.flush()
        elif as_json:
            print_json(result.to_json())
        else:
            say("\n".join(result.lines()))
        if watch and not as_json:
            say("watching for saves (Ctrl-C stops)")

    if not watch:
        one_round()
        raise typer.Exit(last[0].exit_code)
    runs = watch_loop(
        setup, one_round, max_runs=max_runs,
        on_change=lambda paths: say(f"--- saved {', '.join(_shown(p, setup.kernel_dir) for p in paths)}"),
    )
    say(f"dev: stopped after {runs} rounds")
    raise typer.Exit(last[0].exit_code if last else 0)


def _shown(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)
