"""Build the variant a kernel's own tests run against, then run them: `kbuild test`, and each
round of `kbuild dev` (kernel_builder.pipeline.dev_loop), which builds into a folder of its own.
`kbuild bench` (kernel_builder.pipeline.build_then_bench) builds the same variant.

The variant is the one kbuild's runtime loads on this machine (its backend and running
torch: kernel_builder.checks.kernel_tests.machine_selection), or a named one; an up-to-date
variant is not rebuilt."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from kernel_builder.pipeline.options import BuildOptions
from kernel_builder.pipeline.build_kernel import build_kernel
from kernel_builder.pipeline.report import BuildReport
from kernel_builder.checks.kernel_tests import (
    TestRun,
    choose_variant,
    machine_selection,
    run_kernel_tests,
    tests_folder,
    variant_python,
)
from kernel_builder.errors import KbuildError
from kernel_builder.kernel.manifest import Manifest, load_manifest
from kernel_builder.runners.progress import Progress
from kernel_builder.runners.result import JobResult


def build_for_tests(
    kernel_dir: Path,
    *,
    variant: str | None = None,
    out: Path | None = None,
    cuda_arch: tuple[str, ...] = (),
    ops_id: str | None = None,
    on_wait: Callable[[str], None],
    progress: Progress | None = None,
    require: Callable[[Path], object] = tests_folder,
) -> tuple[Manifest, BuildReport]:
    """Build `variant`, else this machine's, into `out` (default KERNEL_DIR/build). What the run
    needs (`require`: the tests/ folder; `kbuild bench` passes its benchmarks' check) and this
    machine's backend in the kernel are checked first, each failing in one line.
    `cuda_arch` and `ops_id` make a development build (kernel_builder.pipeline.plan.plan_build)."""
    require(kernel_dir)
    manifest = load_manifest(kernel_dir)
    manifest.require_buildable()  # [tvm-ffi]: `kbuild build` only, not yet this loop
    matrix = None if variant else machine_selection(manifest)
    options = BuildOptions(variants=(variant,) if variant else (), matrix=matrix, out=out, cuda_arch=cuda_arch)
    return build_kernel(kernel_dir, options, on_wait=on_wait, progress=progress, ops_id=ops_id)


def failed_jobs(report: BuildReport) -> list[JobResult]:
    return [r for r in report.results if r.status == "failed"]


def require_built(report: BuildReport) -> None:
    """A failed build is a KbuildError: running the tests or benchmarks on an older build
    instead would report on code that is not the source's."""
    failed = failed_jobs(report)
    if failed:
        raise KbuildError(f"building {', '.join(r.label for r in failed)} failed: {failed[0].detail}; `kbuild build` shows the log")


def run_tests_on_build(
    kernel_dir: Path,
    manifest: Manifest,
    *,
    variant: str | None = None,
    build_dir: Path | None = None,
    pytest_args: Sequence[str] = (),
    capture: bool = False,
    clean_env: bool = False,
) -> TestRun:
    """Run the kernel's tests against `variant` (default: the one this machine loads) of
    `build_dir` (default KERNEL_DIR/build); `clean_env`: without the caller's credentials."""
    variant_dir = choose_variant(kernel_dir, variant, build_dir)
    return run_kernel_tests(
        kernel_dir, manifest, variant_dir, tuple(pytest_args),
        base_python=variant_python(variant_dir.name), capture=capture, clean_env=clean_env,
    )


def build_and_test(
    kernel_dir: Path,
    *,
    variant: str | None = None,
    pytest_args: Sequence[str] = (),
    capture: bool = False,
    clean_env: bool = False,
    on_wait: Callable[[str], None],
    build: bool = True,
) -> TestRun:
    """`kbuild test`: build what is missing (build_for_tests), then run the kernel's tests on
    it (run_tests_on_build); a failed build stops it (require_built). `build` False: test the
    variant build/ holds as it is (a CI test job, on the artifact its build job made)."""
    if build:
        manifest, report = build_for_tests(kernel_dir, variant=variant, on_wait=on_wait)
        require_built(report)
    else:
        tests_folder(kernel_dir)
        manifest = load_manifest(kernel_dir)
    return run_tests_on_build(kernel_dir, manifest, variant=variant, pytest_args=pytest_args, capture=capture,
                              clean_env=clean_env)
