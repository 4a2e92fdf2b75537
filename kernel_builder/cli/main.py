"""The `kbuild` command line: parses options, calls the modules, prints results.

A KbuildError becomes one line on stderr and its exit code; never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from kernel_builder import __version__
from kernel_builder.cli.output import console as _console
from kernel_builder.cli.output import print_json
from kernel_builder.errors import KbuildError

app = typer.Typer(
    name="kbuild",
    help="Build, check and publish compute kernels for the Hugging Face Kernel Hub.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"kbuild {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version, help="Print kbuild's version."),
) -> None:
    """Build, check and publish compute kernels for the Hugging Face Kernel Hub."""


def _print_variant_rows(title: str, rows: list[dict]) -> None:
    """The table of `kbuild variants` and `kbuild plan` (rows from kernel_builder.build.host.variant_row)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title))
    table.add_column("variant")
    table.add_column("here")
    table.add_column("environment, or why not")
    for row in rows:
        here = "[green]yes[/]" if row["buildable"] else "no"
        table.add_row(escape(row["variant"] or f"({row['backend']})"), here, escape(row["environment"] or row["reason"] or ""))
    _console().print(table)


def _environments_title(chooser) -> str:
    return chooser.primary.describe() if chooser.primary else "no torch in the running interpreter"


MATRIX_OPTION = typer.Option(
    None, "--matrix", "-m",
    help="Select variants of the default matrix that the kernel admits: 'all', or terms that all must hold, "
    "e.g. 'torch>=2.13 backend=cuda,cpu arch=x86_64' or a glob 'torch21[34]-*-cu13*' (see README).",
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
    strict_abi: bool = typer.Option(
        False, "--strict-abi",
        help="Fail a variant whose libraries need symbol versions beyond manylinux_2_28 (default: a warning for "
        "local builds, which follow this machine's glibc; always on inside --runner docker).",
    ),
    import_check: bool = typer.Option(
        True, "--import-check/--no-import-check",
        help="Import each new variant in its environment before installing it (the other checks always run).",
    ),
    compiler_cache: Optional[bool] = typer.Option(
        None, "--compiler-cache/--no-compiler-cache",
        help="Launch compiles through ccache or sccache (default: when installed; KBUILD_COMPILER_CACHE=ccache|sccache|none).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON report (every job, its checks, cache hits) on stdout."),
) -> None:
    """Build the kernel for this machine's variants (or --variant, or a --matrix selection), in parallel: one folder per variant under build/."""
    from rich.markup import escape

    from kernel_builder.build.options import BuildOptions
    from kernel_builder.build.pipeline import build_kernel
    from kernel_builder.compile.compiler_cache import find_compiler_cache
    from kernel_builder.compile.parallelism import compile_parallelism
    from kernel_builder.runners.progress import progress_for

    console = _console(stderr=True)
    say = (lambda message: None) if as_json else (lambda message: console.print(escape(message)))
    options = BuildOptions(  # bad flag values fail here, before any work
        variants=tuple(variant or ()), matrix=matrix, shard=shard, variant_names=variant_names, out=out,
        env=env, create_env=create_env, torch_index=torch_index, jobs=jobs, max_jobs=max_jobs,
        nvcc_threads=nvcc_threads, compiler_cache=compiler_cache, fail_fast=fail_fast,
        import_check=import_check, strict_abi=strict_abi, runner=runner,
    )
    compile_parallelism(jobs=max_jobs, nvcc_threads=nvcc_threads)  # and so do MAX_JOBS, NVCC_THREADS
    find_compiler_cache(compiler_cache)  # and a compiler cache that was asked for but is missing
    manifest, report = build_kernel(
        kernel_dir, options, chooser=options.env_chooser(say), progress=progress_for(console, quiet=as_json),
        on_wait=lambda message: console.print(escape(message)),  # stderr, with --json too
    )
    if as_json:
        print_json(report.to_json())
    else:
        _print_build_report(console, report)
    if not report.ok:
        raise typer.Exit(1)
    if not any(r.status in ("built", "up-to-date", "checked") for r in report.results):
        skipped = "selected variant" if matrix is not None else "backend"
        raise KbuildError(f"nothing to build for '{manifest.name}' on this machine: every {skipped} was skipped")


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
            table.add_column(column, justify=justify, no_wrap=column != "variant")
        for r in jobs:
            hits = f"{r.compiler_cache.hits}/{r.compiler_cache.hits + r.compiler_cache.misses}" if r.compiler_cache else ""
            table.add_row(escape(r.label), f"[{style.get(r.status, 'bold')}]{r.status}[/]", f"{r.seconds:.1f} s", human_size(r.size), hits)
        console.print(table)
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
    matrix: Optional[str] = MATRIX_OPTION,
    shard: Optional[str] = SHARD_OPTION,
    variant_names: Optional[str] = VARIANT_NAMES_OPTION,
    env: Optional[Path] = ENV_OPTION,
    create_env: bool = CREATE_ENV_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print the jobs as a JSON list."),
) -> None:
    """Print the jobs `kbuild build` would run with these options, and why it skips the rest; builds nothing."""
    from kernel_builder.environments.choice import EnvChooser
    from kernel_builder.kernel.manifest import load_manifest
    from kernel_builder.build.plan import naming_style, plan_build
    from kernel_builder.build.selection import resolve

    manifest = load_manifest(kernel_dir)
    selected = resolve(manifest, matrix, shard)
    style = naming_style(variant_names)
    chooser = EnvChooser.from_options(env, create=create_env)
    out = manifest.root / "build"
    requested = tuple(v.with_style(style) for v in selected or ())
    rows = plan_build(manifest, chooser, out, requested, skip_unbuildable=True, style=style).rows(chooser)
    if as_json:
        print_json(rows)
        return
    builds = sum(row["buildable"] for row in rows)
    _print_variant_rows(f"{manifest.name}: {builds} of {len(rows)} build here ({_environments_title(chooser)})", rows)


def check(
    build_dir: Path = typer.Argument(Path("."), help="A kernel repo (checks every variant in its build/), a build/ folder or one variant folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
) -> None:
    """Check built variants: manylinux_2_28 symbol versions, NEEDED libraries, metadata and digests, stable-ABI symbols, import in their environment."""
    from rich.markup import escape
    from rich.table import Table

    from kernel_builder.checks.variant_checks import FAILED, OK, WARNING, check_build

    reports = check_build(build_dir)
    if as_json:
        print_json([r.to_json() for r in reports])
    else:
        console = _console()
        style = {OK: "[green]ok[/]", FAILED: "[red]FAILED[/]", WARNING: "[yellow]warning[/]"}
        for report in reports:
            table = Table(title=escape(str(report.folder)), title_justify="left")
            table.add_column("check")
            table.add_column("status")
            table.add_column("finding")
            for r in report.results:
                finding = "\n".join(r.findings) if r.findings else r.detail
                table.add_row(r.check, style.get(r.status, r.status), escape(finding))
            console.print(table)
    if not all(r.ok for r in reports):
        raise typer.Exit(1)


def publish(
    kernel_dir: Path = typer.Argument(Path("."), help="The kernel repo (holding build.toml and build/)."),
    tag: str = typer.Option(..., "--tag", "-t", help="The release, vMAJOR.MINOR.PATCH; MAJOR must be build.toml's version."),
    repo_id: Optional[str] = typer.Option(None, "--repo-id", help="ORG/NAME on the Hub (default: build.toml's \\[general.hub] repo-id)."),
    private: bool = typer.Option(False, "--private", help="Create the repo private (an existing repo keeps its visibility)."),
    create_pr: bool = typer.Option(False, "--create-pr", help="Open a pull request to branch vMAJOR instead of committing; no tag."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the branch, tag and files (with sizes); touch nothing."),
    force: bool = typer.Option(False, "--force", help="Move the tag if it exists already."),
    allow_dirty: bool = typer.Option(False, "--allow-dirty", help="Publish a build of uncommitted sources."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan (--dry-run) or the result as JSON."),
) -> None:
    """Publish every variant under build/ to branch vMAJOR of a Hub repo in one commit, tag it, and update the repo card."""
    from rich.markup import escape

    from kernel_builder.publish.release import plan_publish
    from kernel_builder.publish.release import publish as run_publish

    console = _console(stderr=True)
    plan = plan_publish(kernel_dir, tag, repo_id, allow_dirty)
    if dry_run:
        if as_json:
            print_json(plan.to_json())
            return
        out = _console()
        out.print(f"would publish {escape(plan.repo_id)}: branch {plan.branch}, tag {plan.tag}, "
                  f"{len(plan.uploads)} files ({plan.size / 1e6:.2f} MB) in one commit")
        for upload in plan.uploads:
            out.print(f"  {upload.size:>12,}  {escape(upload.path_in_repo)}")
        out.print("  and README.md (the repo card) on main")
        return
    done = run_publish(plan, private=private, create_pr=create_pr, force=force,
                       say=(lambda line: None) if as_json else (lambda line: console.print(escape(line))))
    if as_json:
        from dataclasses import asdict

        print_json(asdict(done))
        return
    where = f"tag {done.tag}" if done.tag else f"pull request {done.pull_request}"
    console.print(f"published {escape(done.repo_id)} {where} at {done.commit[:12]} (branch {done.branch}, {done.repo_type} repo)")


def variants(
    kernel_dir: Optional[Path] = typer.Argument(None, help="Limit to what this kernel repo supports."),
    env: Optional[Path] = typer.Option(None, "--env", help="Judge with this build environment instead of the running one."),
    as_json: bool = typer.Option(False, "--json", help="Print the matrix as JSON."),
) -> None:
    """List the default variant matrix and mark what this machine can build (and why not)."""
    from kernel_builder.environments.choice import EnvChooser
    from kernel_builder.build.host import judge
    from kernel_builder.kernel.manifest import load_manifest
    from kernel_builder.variants import BACKENDS, default_matrix

    manifest = load_manifest(kernel_dir) if kernel_dir is not None else None
    backends = manifest.general.backends if manifest else BACKENDS
    chooser = EnvChooser.from_options(env)
    rows = [judge(manifest, v, chooser) for v in default_matrix().variants if v.backend in backends]
    if as_json:
        print_json(rows)
        return
    _print_variant_rows(f"variants ({_environments_title(chooser)})", rows)


def init(
    name: str = typer.Argument(..., help="Kernel name, kebab-case (e.g. my-kernel); also the folder created."),
    backends: str = typer.Option("cpu", "--backends", "-b", help="Comma-separated: cpu,cuda,metal,rocm,xpu."),
) -> None:
    """Scaffold a kernel repo with a working example op, tests and CI-ready layout."""
    from kernel_builder.scaffold.new_kernel import scaffold

    chosen = [b.strip() for b in backends.split(",") if b.strip()]
    written = scaffold(Path(name), name.rstrip("/").split("/")[-1], chosen)
    _console().print(f"created {name}/ ({len(written)} files); next: kbuild build {name}")


def demo(
    workdir: Optional[Path] = typer.Option(None, "--dir", help="Where to scaffold (default: a new temp folder)."),
) -> None:
    """Scaffold, build, load and call the embedded example kernel: a smoke test of kbuild."""
    from kernel_builder.scaffold.demo import run_demo

    console = _console()
    run_demo(workdir, say=console.print)


def version() -> None:
    """Print kbuild's version (also `kbuild --version`)."""
    typer.echo(f"kbuild {__version__}")


def _register_commands() -> None:
    """Every command and command group of `kbuild`, in the order `kbuild --help` lists them."""
    from kernel_builder.cli import ci, docker, doctor, env, kernel_test, lock, migrate

    commands = {
        "init": init, "build": build, "plan": plan, "variants": variants, "check": check, "test": kernel_test.test,
        "publish": publish, "lock": lock.lock, "migrate": migrate.migrate, "doctor": doctor.doctor, "demo": demo,
        "version": version,
    }
    groups = {
        "env": (env.env_app, "List, create and prune kbuild's cached build environments."),
        "docker": (docker.docker_app, "Build the images that `kbuild build --runner docker` builds in."),
        "ci": (ci.ci_app, "Write a kernel repo's CI workflow (GitHub Actions), and run its steps."),
    }
    for name, command in commands.items():
        app.command(name)(command)
    for name, (group, help_text) in groups.items():
        app.add_typer(group, name=name, help=help_text)


def main() -> None:
    try:
        # Outside standalone mode click returns typer.Exit's code instead of exiting.
        code = app(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except KbuildError as e:
        from rich.markup import escape

        _console(stderr=True).print(f"[red]kbuild: error:[/] {escape(e.message)}")
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        _console(stderr=True).print("kbuild: interrupted")
        sys.exit(130)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:
        # Usage errors and aborts, from click or the copy of click that typer bundles
        # (typer._click): they carry their own message and exit code.
        if callable(getattr(e, "show", None)) and isinstance(getattr(e, "exit_code", None), int):
            e.show()
            sys.exit(e.exit_code)
        if type(e).__name__ == "Abort":
            sys.exit(1)
        raise


_register_commands()

if __name__ == "__main__":
    main()
