"""`kbuild bench`: build the variant kbuild's runtime loads on this machine (or a named one) when
it is missing or stale, as `kbuild test` does (kernel_builder.pipeline.build_then_test), then run
the kernel's own benchmarks against it with `kernels benchmark`
(kernel_builder.checks.kernel_benchmarks)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from kernel_builder.checks.kernel_benchmarks import BenchRun, benchmark_scripts, run_kernel_benchmarks
from kernel_builder.checks.kernel_tests import choose_variant, variant_python
from kernel_builder.pipeline.build_then_test import build_for_tests, require_built


def build_and_bench(
    kernel_dir: Path,
    *,
    variant: str | None = None,
    iterations: int = 100,
    warmup: int = 10,
    capture: bool = False,
    on_wait: Callable[[str], None],
) -> BenchRun:
    """Build what is missing, then benchmark it. No benchmarks/benchmark*.py (or one without a
    Benchmark class) fails before anything is built, a failed build before anything runs."""
    manifest, report = build_for_tests(kernel_dir, variant=variant, on_wait=on_wait, require=benchmark_scripts)
    require_built(report)
    variant_dir = choose_variant(kernel_dir, variant)
    return run_kernel_benchmarks(kernel_dir, manifest, variant_dir, base_python=variant_python(variant_dir.name),
                                 iterations=iterations, warmup=warmup, capture=capture)
