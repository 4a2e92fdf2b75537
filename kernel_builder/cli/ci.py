"""`kbuild ci ...`: CI for kernel repos (ci_github.py). `github` writes the workflows; `matrix`,
`next-tag`, `cache-key` and `complete` are steps they run in their plan, build and publish jobs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from kernel_builder.cli.output import console as _console
from kernel_builder.cli.output import new_app

ci_app = new_app("Continuous integration for kernel repos: write a GitHub Actions workflow, and the steps it runs.")


@ci_app.command()
def github(
    kernel_dir: Path = typer.Argument(Path("."), help="The kernel repo (holding build.toml)."),
    matrix: Optional[str] = typer.Option(
        None, "--matrix", "-m",
        help="The variants CI builds, as `kbuild build --matrix` takes them (default: 'os=linux arch=x86_64'; "
        "'os=linux' adds the aarch64 variants).",
    ),
    shards: Optional[int] = typer.Option(
        None, "--shards",
        help="Build each arch's variants in N jobs, each a `--shard I/N` of them (default: one job per variant)."
    ),
    install: Optional[str] = typer.Option(
        None, "--install",
        help="The pip requirement that installs kbuild in CI (default: where this kbuild came from: the URL pip "
        "installed it from, or its checkout's remote and commit), e.g. 'kbuild[docker] @ git+https://...@COMMIT'.",
    ),
    gpu_runner: Optional[List[str]] = typer.Option(
        None, "--gpu-runner",
        help="BACKEND=LABEL (repeatable): also test that backend's variants on self-hosted runners with this label.",
    ),
    build_timeout: int = typer.Option(180, "--build-timeout", help="Minutes a build job may run (1 to 360)."),
    shared_cache: str = typer.Option(
        "gha", "--shared-cache",
        help="One sccache cache for every build job: gha (the GitHub Actions cache), redis (secret SCCACHE_REDIS_ENDPOINT), "
        "s3 (variables SCCACHE_BUCKET, SCCACHE_REGION, SCCACHE_ENDPOINT; AWS secrets); these build on the runner. "
        "none: build in kbuild's images, each job's ccache in actions/cache.",
    ),
    no_sign: bool = typer.Option(
        False, "--no-sign", help="Publish unsigned: no keyless Sigstore signing (kbuild sign) in the publish job."
    ),
    arm_runner: str = typer.Option(
        "ubuntu-24.04-arm", "--arm-runner",
        help="The runs-on label of the aarch64 variants' build and test jobs (selected with e.g. --matrix os=linux): "
        "GitHub's arm64 runner by default, natively, no emulation.",
    ),
    refresh: Optional[str] = typer.Option(
        None, "--refresh", metavar="daily|weekly|monthly",
        help="Write .github/workflows/kbuild-refresh.yml instead: on that schedule, with kbuild's newest matrix data, "
        "build, test and publish exactly the variants the release branch lacks (`kbuild plan --missing-from`, "
        "`kbuild publish --add-variants` under the next patch tag).",
    ),
    output_cache: Optional[str] = typer.Option(
        None, "--output-cache", metavar="URL",
        help="Keep the build jobs' output cache in this store instead of the GitHub Actions cache: s3://BUCKET/PREFIX "
        "(secrets AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; variables AWS_REGION, AWS_ENDPOINT_URL) or "
        "hf://datasets/ORG/NAME/PREFIX (secret HF_TOKEN).",
    ),
    force: bool = typer.Option(False, "--force", help="Replace an existing workflow."),
) -> None:
    """Write .github/workflows/kbuild.yml: plan; build each variant on the GitHub runner (`kbuild build --runner local`, one sccache cache shared through --shared-cache, default gha, and an output cache keyed by each variant's input id: what was built is never compiled again), or with --shared-cache none in kbuild's build images (`--runner docker`); aarch64 variants on the arm64 runner; test each CPU variant with `kbuild test`; publish tags v*.*.*."""
    from rich.markup import escape

    from kernel_builder.scaffold.ci_github import WorkflowOptions, write_github_workflow

    options = WorkflowOptions.from_flags(matrix, shards, install, gpu_runner or (), build_timeout, shared_cache,
                                         sign=not no_sign, arm_runner=arm_runner, refresh=refresh,
                                         output_cache=output_cache)
    path, notes = write_github_workflow(kernel_dir, options, force=force)
    console = _console()
    console.print(f"wrote {escape(str(path))}")
    for note in notes:
        console.print(escape(note))


@ci_app.command("matrix")
def matrix_command(
    plan_json: Path = typer.Argument(..., help="The output of `kbuild plan --matrix SEL --json`."),
    shards: Optional[int] = typer.Option(
        None, "--shards", help="Split each arch's builds into N jobs, as `--shard I/N` does."),
    arm_runner: str = typer.Option("ubuntu-24.04-arm", "--arm-runner", help="The runs-on label of aarch64 jobs."),
    allow_empty: bool = typer.Option(
        False, "--allow-empty", help="A plan without variants gives empty matrices (the refresh workflow's), not an error."),
) -> None:
    """Print the workflow's job matrices from a plan: one line of JSON {build, test, gpu, variants}."""
    from kernel_builder.scaffold.ci_github import matrices_from_plan

    matrices = matrices_from_plan(plan_json, shards, arm_runner, allow_empty)
    sys.stdout.write(json.dumps(matrices, separators=(",", ":")) + "\n")


@ci_app.command("cache-key")
def cache_key_command(
    plan_json: Path = typer.Argument(..., help="The output of `kbuild plan --input-ids --json` for what a job builds."),
    prefix: str = typer.Option("kbuild-output-", "--prefix", help="What the key starts with."),
) -> None:
    """Print a build job's output cache key: the variant and its input id, or for several variants a hash of every pair."""
    from kernel_builder.scaffold.ci_github import cache_key

    sys.stdout.write(prefix + cache_key(plan_json) + "\n")


@ci_app.command("next-tag")
def next_tag_command(
    release: str = typer.Option(..., "--release", metavar="ORG/NAME@vN", help="The release branch of a Hub repo."),
) -> None:
    """Print the next patch tag of that major on the Hub (vN.M.P+1), for `kbuild publish --add-variants --tag`."""
    from kernel_builder.scaffold.ci_github import next_tag

    sys.stdout.write(next_tag(release) + "\n")


@ci_app.command()
def complete(
    build_dir: Path = typer.Argument(Path("build"), help="The folder the build artifacts were downloaded into."),
    expect: str = typer.Option(..., "--expect", help="The planned variants, space-separated."),
) -> None:
    """Fail unless BUILD_DIR holds exactly the planned variants (the publish job's check)."""
    from kernel_builder.scaffold.ci_github import check_complete

    present = check_complete(build_dir, expect.split())
    _console().print(f"complete: all {len(present)} planned variants are here")
