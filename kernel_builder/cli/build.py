"""`kbuild build`, `kbuild plan` and `kbuild variants`: what builds here, and building it."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from kernel_builder.cli.output import console as _console
from kernel_builder.cli.output import print_json, print_table


def _print_variant_rows(title: str, rows: list[dict]) -> None:
    """The table of `kbuild variants` and `kbuild plan` (rows from kernel_builder.pipeline.host.variant_row)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title))
    table.add_column("variant")
    table.add_column("here")
    table.add_column("environment, or why not")
    for row in rows:
        here = "[green]yes[/]" if row["buildable"] else "no"
        table.add_row(escape(row["variant"] or f"({row['backend']})"), here, escape(row["environment"] or row["reason"] or ""))
    print_table(_console(), table)


MATRIX_OPTION = typer.Option(
    None, "--matrix", "-m",
    help="Select variants of the default matrix that the kernel admits: 'all', or terms that all must hold, "
    "e.g. 'torch>=2.13 backend=cuda,cpu arch=x86_64' or a glob 'torch21[34]-*-cu13*' (see docs/guides/matrix.md).",
)
SHARD_OPTION = typer.Option(
    None, "--shard", help="With --matrix: take shard I of N (1-based, e.g. 2/3), a stable 1/N of the selected variants."
)
ENV_OPTION = typer.Option(
    None, "--env", help="Build in this existing environment (a venv folder or its python) instead of the running one."
)
VARIANT_NAMES_OPTION = typer.Option(
    None, "--variant-names",
    help="How to name the variants kbuild picks (this machine's, --matrix): 'legacy' (default, "
    "torch213-cxx11-cpu-x86_64-linux; every kernels release reads it, and transformers <= 5.24 pins kernels < 0.19, "
    "which cannot read new names) or 'new' (torch-2.13-cxx11-cpu-cpython-3.9-abi3-x86_64-linux; needs kernels >= 0.19.1). "
    "--variant names are built as spelled; a build replaces its folder of the other style.",
)
CREATE_ENV_OPTION = typer.Option(
    True, "--create-env/--no-create-env",
    help="Create a missing build environment for a variant (a venv with the right torch, cached), or skip it.",
)


def build(
    kernel_dir: Path = typer.Argument(Path("."), help="The kernel repo (holding build.toml)."),
    variant: Optional[List[str]] = typer.Option(
        None, "--variant", "-V", help="Build exactly this variant (repeatable), e.g. torch213-cxx11-cpu-x86_64-linux "
        "or torch-2.13-cxx11-cpu-cpython-3.9-abi3-x86_64-linux."
    ),
    matrix: Optional[str] = MATRIX_OPTION,
    shard: Optional[str] = SHARD_OPTION,
    variant_names: Optional[str] = VARIANT_NAMES_OPTION,
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output folder (default: KERNEL_DIR/build)."),
    env: Optional[Path] = ENV_OPTION,
    create_env: bool = CREATE_ENV_OPTION,
    torch_index: Optional[str] = typer.Option(
        None, "--torch-index", help="pip index URL for torch when creating an environment (default: by flavour)."
    ),
    jobs: Optional[int] = typer.Option(
        None, "--jobs", "-j", help="Variants built at once (default: from cores and free memory)."
    ),
    max_jobs: Optional[int] = typer.Option(
        None, "--max-jobs", help="Parallel compiles within one variant (default: its share of cores and memory; MAX_JOBS)."
    ),
    nvcc_threads: Optional[int] = typer.Option(
        None, "--nvcc-threads", help="Architectures nvcc compiles at once (default: from cores and memory; NVCC_THREADS)."
    ),
    fail_fast: bool = typer.Option(False, "--fail-fast", help="Stop starting new jobs once one fails."),
    runner: str = typer.Option(
        "local", "--runner", help="local: this machine's toolchains and build environments; docker: one container "
        "per job from the build images in docker/ (built when missing; see `kbuild docker build-images`).",
    ),
    base_image: Optional[str] = typer.Option(
        None, "--base-image", metavar="IMAGE",
        help="With --runner docker: the base of the build images (default: $KBUILD_DOCKER_BASE_IMAGE, else "
        "manylinux_2_28; any glibc Linux with python3, g++ and git, e.g. from docker/offline-base.sh).",
    ),
    strict_abi: bool = typer.Option(
        False, "--strict-abi",
        help="Fail a variant whose libraries need symbol versions beyond manylinux_2_28 (default: a warning for "
        "local builds, which follow this machine's glibc; always on in --runner docker on a manylinux base).",
    ),
    import_check: bool = typer.Option(
        True, "--import-check/--no-import-check",
        help="Import each new variant in its environment before installing it (the other checks always run).",
    ),
    compiler_cache: Optional[bool] = typer.Option(
        None, "--compiler-cache/--no-compiler-cache",
        help="Launch compiles through ccache or sccache (default: when installed; KBUILD_COMPILER_CACHE=ccache|sccache|none).",
    ),
    compiler_cache_tool: Optional[str] = typer.Option(
        None, "--compiler-cache-tool", metavar="TOOL",
        help="ccache or sccache (implies --compiler-cache). sccache uses the remote cache its SCCACHE_* variables set "
        "(e.g. SCCACHE_REDIS_ENDPOINT, SCCACHE_BUCKET, SCCACHE_GHA_ENABLED) and reports remote hits per job.",
    ),
    dist_scheduler: Optional[str] = typer.Option(
        None, "--dist-scheduler", metavar="URL",
        help="Send compiles to this sccache-dist scheduler (implies sccache; default: $KBUILD_DIST_SCHEDULER).",
    ),
    dist_token: Optional[str] = typer.Option(
        None, "--dist-token", help="The scheduler's client token (default: $KBUILD_DIST_TOKEN).",
    ),
    dist_fallback_local: bool = typer.Option(
        False, "--dist-fallback-local", help="Compile here when the --dist-scheduler does not answer (default: fail).",
    ),
    cuda_arch: Optional[str] = typer.Option(
        None, "--cuda-arch", metavar="X.Y[,X.Y]",
        help="Compile CUDA variants for these architectures only (a development build for one GPU, as `kbuild dev` "
        "makes; it replaces a full build in the output folder, so give it its own --out).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON report (every job, its checks, cache hits) on stdout."),
    output_cache: Optional[str] = typer.Option(
        None, "--output-cache", metavar="URL",
        help="A store of built variants keyed by each job's input id: a verified entry is installed instead of "
        "compiling, a new build is uploaded. A folder, file://, s3://, gs://, hf:// or http(s):// (read-only) URL "
        "(default: $KBUILD_OUTPUT_CACHE; see docs/guides/output-cache.md).",
    ),
    output_cache_mode: Optional[str] = typer.Option(
        None, "--output-cache-mode", metavar="MODE",
        help="readwrite (default) or read: look up but never upload, for builds of untrusted code such as pull "
        "requests from forks (default: $KBUILD_OUTPUT_CACHE_MODE).",
    ),
) -> None:
    """Build the kernel for this machine's variants (or --variant, or a --matrix selection), in parallel: one folder per variant under build/."""
    from rich.markup import escape

    from kernel_builder.pipeline.options import BuildOptions
    from kernel_builder.pipeline.build_kernel import build_kernel
    from kernel_builder.runners.progress import progress_for

    console = _console(stderr=True)
    say = (lambda message: None) if as_json else (lambda message: console.print(escape(message)))
    options = BuildOptions(  # bad flag values fail here, before any work
        variants=tuple(variant or ()), matrix=matrix, shard=shard, variant_names=variant_names, out=out,
        env=env, create_env=create_env, torch_index=torch_index, jobs=jobs, max_jobs=max_jobs,
        nvcc_threads=nvcc_threads, compiler_cache=compiler_cache, compiler_cache_tool=compiler_cache_tool,
        dist_scheduler=dist_scheduler, dist_token=dist_token, dist_fallback_local=dist_fallback_local, fail_fast=fail_fast,
        import_check=import_check, strict_abi=strict_abi, runner=runner, base_image=base_image, cuda_arch=cuda_arch or (),
        output_cache=output_cache, output_cache_mode=output_cache_mode,
    )
    _, report = build_kernel(
        kernel_dir, options, say=say, progress=progress_for(console, quiet=as_json),
        on_wait=lambda message: console.print(escape(message)),  # stderr, with --json too
    )
    if as_json:
        print_json(report.to_json())
    else:  # the report on stdout, progress on stderr: `kbuild build | tee log` keeps the summary
        _print_build_report(_console(), report)
    if not report.ok:
        raise typer.Exit(1)
    report.require_some_built(selection=matrix is not None)


_LOG_TAIL_LINES = 15


def _print_build_report(console, report) -> None:
    """The tail of each failed job's log; a table of the jobs; what failed, warned or was
    skipped and why (skips grouped by reason); the totals."""
    from rich.markup import escape
    from rich.table import Table

    from kernel_builder.formatting import human_size

    jobs = [r for r in report.results if r.status != "skipped"]
    for r in jobs:
        if r.status == "failed" and r.log:
            try:
                lines = Path(r.log).read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:]
            except OSError:
                lines = []
            if lines:
                console.print(f"[red]{escape(r.label)}[/]: last lines of {escape(r.log)}")
                console.print(escape("\n".join("    " + line for line in lines)))
    style = {"built": "green", "up-to-date": "green", "checked": "cyan", "failed": "red", "cancelled": "yellow"}
    if jobs:
        table = Table(show_edge=False)
        for column, justify in (("variant", "left"), ("status", "left"), ("time", "right"), ("size", "right"), ("cache hits", "right")):
            table.add_column(column, justify=justify, no_wrap=True)
        for r in jobs:
            hits = f"{r.compiler_cache.hits}/{r.compiler_cache.hits + r.compiler_cache.misses}" if r.compiler_cache else ""
            status = f"{r.status} ({r.detail})" if r.status == "up-to-date" and r.detail else r.status
            table.add_row(escape(r.label), f"[{style.get(r.status, 'bold')}]{escape(status)}[/]", f"{r.seconds:.1f} s", human_size(r.size), hits)
        print_table(console, table)
    for r in jobs:
        if r.status in ("failed", "cancelled", "checked"):
            console.print(f"[{style[r.status]}]{r.status}[/] {escape(r.label)}: {escape(r.detail)}")
        for warning in r.warnings:
            console.print(f"[yellow]warning[/] {escape(r.label)}: {escape(warning)}")
    skipped: dict[str, list[str]] = {}
    for r in report.results:
        if r.status == "skipped":
            skipped.setdefault(r.detail, []).append(r.label)
    for reason, labels in skipped.items():
        console.print(f"[yellow]skipped[/] {escape(', '.join(labels))}: {escape(reason)}")
    console.print(escape(f"{report.summary_line()}; output in {report.out_dir}"))


def plan(
    kernel_dir: Path = typer.Argument(Path("."), help="The kernel repo (holding build.toml)."),
    variant: Optional[List[str]] = typer.Option(
        None, "--variant", "-V", help="Plan exactly this variant (repeatable), as `kbuild build --variant` builds it."),
    matrix: Optional[str] = MATRIX_OPTION,
    shard: Optional[str] = SHARD_OPTION,
    variant_names: Optional[str] = VARIANT_NAMES_OPTION,
    env: Optional[Path] = ENV_OPTION,
    create_env: bool = CREATE_ENV_OPTION,
    missing_from: Optional[str] = typer.Option(
        None, "--missing-from", metavar="ORG/NAME@vN",
        help="List only the variants that this version branch of the Hub does not have yet (either naming style)."),
    with_input_ids: bool = typer.Option(
        False, "--input-ids",
        help="Also give each job's input id, the key its output cache entry is stored under (`input-id` in --json): "
        "its build environment is created where missing and its toolchain prepared; nothing is compiled."),
    as_json: bool = typer.Option(False, "--json", help="Print the jobs as a JSON list."),
) -> None:
    """Print the jobs `kbuild build` would run with these options, and why it skips the rest; builds nothing."""
    from kernel_builder.pipeline.options import BuildOptions
    from kernel_builder.pipeline.plan_assembly import plan_table

    options = BuildOptions(variants=tuple(variant or ()), matrix=matrix, shard=shard, variant_names=variant_names,
                           env=env, create_env=create_env)
    table = plan_table(kernel_dir, options, missing_from, with_input_ids)
    if as_json:
        print_json(table.rows)
        return
    builds = sum(row["buildable"] for row in table.rows)
    counts = (f"{len(table.rows)} missing from {missing_from}, {builds} of them build here" if missing_from
              else f"{builds} of {len(table.rows)} build here")
    _print_variant_rows(f"{table.kernel}: {counts} ({table.environments})", table.rows)
    for row in table.rows if with_input_ids else ():
        if row.get("input-id"):
            _console().print(f"{row['variant']}: input id {row['input-id']}", markup=False)


def variants(
    kernel_dir: Optional[Path] = typer.Argument(None, help="Limit to what this kernel repo supports."),
    env: Optional[Path] = typer.Option(None, "--env", help="Judge with this build environment instead of the running one."),
    as_json: bool = typer.Option(False, "--json", help="Print the matrix as JSON."),
) -> None:
    """List the default variant matrix and mark what this machine can build (and why not)."""
    from kernel_builder.pipeline.plan_assembly import matrix_table

    table = matrix_table(kernel_dir, env)
    if as_json:
        print_json(table.rows)
        return
    _print_variant_rows(f"variants ({table.environments})", table.rows)
