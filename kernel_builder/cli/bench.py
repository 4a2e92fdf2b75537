"""`kbuild bench [KERNEL_DIR] [--variant V] [--iterations N] [--warmup N] [--json]`: build what is
missing, then run the kernel's benchmarks/benchmark*.py against the built variant with
`kernels benchmark` (kernel_builder.pipeline.build_then_bench)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kernel_builder.cli.output import console as _console
from kernel_builder.cli.output import print_json


def bench(
    kernel_dir: Path = typer.Argument(Path("."), help="The kernel repo (holding build.toml and benchmarks/)."),
    variant: Optional[str] = typer.Option(
        None, "--variant", "-V", help="Benchmark this variant (built when missing) instead of the one this machine loads."
    ),
    iterations: int = typer.Option(100, "--iterations", min=1, help="Timed calls per workload (kernels benchmark's --iterations)."),
    warmup: int = typer.Option(10, "--warmup", min=0, help="Untimed calls before them (kernels benchmark's --warmup)."),
    as_json: bool = typer.Option(
        False, "--json", help="Print a JSON summary on stdout: kernels' results per workload (its table goes to stderr)."
    ),
) -> None:
    """Run the kernel's benchmarks (KERNEL_DIR/benchmarks/benchmark*.py, classes of
    kernels.benchmark.Benchmark) against its build with `kernels benchmark`, which times each
    workload and checks it against its reference."""
    from rich.markup import escape

    from kernel_builder.pipeline.build_then_bench import build_and_bench

    console = _console(stderr=True)
    run = build_and_bench(kernel_dir, variant=variant, iterations=iterations, warmup=warmup, capture=as_json,
                          on_wait=lambda m: console.print(escape(m)))
    if as_json:
        print_json(run.to_json())
    else:
        _console().print(escape("\n".join(run.lines())))
    if run.exit_code:
        raise typer.Exit(run.exit_code)
