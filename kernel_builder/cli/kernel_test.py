"""`kbuild test [KERNEL_DIR] [--variant V] [--json] [-- PYTEST_ARGS]`: build what is missing,
then run the kernel's own tests against the built variant (kernel_builder.checks.kernel_tests)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from kernel_builder.cli.output import console as _console
from kernel_builder.cli.output import print_json
from kernel_builder.errors import KbuildError


def test(
    kernel_dir: Path = typer.Argument(Path("."), help="The kernel repo (holding build.toml and tests/)."),
    variant: Optional[str] = typer.Option(
        None, "--variant", "-V", help="Test this variant (built when missing) instead of the one this machine loads."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary on stdout (pytest's output goes to stderr)."),
    pytest_args: Optional[List[str]] = typer.Argument(None, help="Arguments for pytest, after `--`."),
) -> None:
    """Run the kernel's own tests (KERNEL_DIR/tests) against its build: the variant importable by
    its python name, LOCAL_KERNELS pointing at the build, python-depends and the tests' imports
    installed in a cached test environment."""
    from rich.markup import escape

    from kernel_builder.build.options import BuildOptions
    from kernel_builder.build.pipeline import build_kernel
    from kernel_builder.checks.kernel_tests import choose_variant, machine_selection, run_kernel_tests, tests_folder, variant_python

    from kernel_builder.kernel.manifest import load_manifest

    console = _console(stderr=True)
    tests_folder(kernel_dir)
    matrix = None if variant else machine_selection(load_manifest(kernel_dir))
    manifest, report = build_kernel(
        kernel_dir, BuildOptions(variants=(variant,) if variant else (), matrix=matrix),
        on_wait=lambda m: console.print(escape(m)),
    )
    failed = [r for r in report.results if r.status == "failed"]
    if failed:  # testing an older build instead would report on code that is not the source's
        raise KbuildError(f"building {', '.join(r.label for r in failed)} failed: {failed[0].detail}; `kbuild build` shows the log")
    variant_dir = choose_variant(kernel_dir, variant)
    run = run_kernel_tests(
        kernel_dir, manifest, variant_dir, tuple(pytest_args or ()),
        base_python=variant_python(variant_dir.name), capture=as_json,
    )
    if as_json:
        print_json(run.to_json())
    else:
        console.print(escape(run.summary()))
        for s in run.skipped:
            console.print(escape(f"  skipped {s['count']}: {s['reason']}"))
        for n in run.not_installed:
            console.print(escape(f"  not installed (the tests importing it cannot run): {n['reason']}"))
    if run.exit_code == 5:
        console.print(escape(f"no tests found in {kernel_dir / 'tests'}"))
    if run.exit_code:
        raise typer.Exit(run.exit_code)

