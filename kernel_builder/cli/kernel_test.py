"""`kbuild test [KERNEL_DIR] [--variant V] [--json] [--clean-env] [-- PYTEST_ARGS]`: build what is missing,
then run the kernel's own tests against the built variant (kernel_builder.pipeline.build_then_test)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from kernel_builder.cli.output import console as _console
from kernel_builder.cli.output import print_json


def test(
    kernel_dir: Path = typer.Argument(Path("."), help="The kernel repo (holding build.toml and tests/)."),
    variant: Optional[str] = typer.Option(
        None, "--variant", "-V", help="Test this variant (built when missing) instead of the one this machine loads."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary on stdout (pytest's output goes to stderr)."),
    clean_env: bool = typer.Option(
        False, "--clean-env", help="Run the tests with only a minimal allow-list of variables (PATH, HOME, locale, "
        "device selection): no HF_TOKEN or other credentials of yours.",
    ),
    no_build: bool = typer.Option(
        False, "--no-build", help="Test the variant build/ holds as it is, even if out of date: nothing is built "
        "(CI's test jobs, on what their build job made).",
    ),
    pytest_args: Optional[List[str]] = typer.Argument(None, help="Arguments for pytest, after `--`."),
) -> None:
    """Run the kernel's own tests (KERNEL_DIR/tests) against its build: the variant importable by
    its python name, LOCAL_KERNELS pointing at the build, python-depends and the tests' imports
    installed in a cached test environment."""
    from rich.markup import escape

    from kernel_builder.pipeline.build_then_test import build_and_test

    console = _console(stderr=True)
    run = build_and_test(kernel_dir, variant=variant, pytest_args=pytest_args or (), capture=as_json, clean_env=clean_env,
                         on_wait=lambda m: console.print(escape(m)), build=not no_build)
    if as_json:
        print_json(run.to_json())
    else:
        console.print(escape("\n".join(run.lines())))
    if run.exit_code:
        raise typer.Exit(run.exit_code)

