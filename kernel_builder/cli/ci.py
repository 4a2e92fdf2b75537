"""`kbuild ci ...`: CI for kernel repos (ci_github.py). `github` writes the workflow; `matrix`
and `complete` are the steps that workflow runs in its plan and publish jobs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from kernel_builder.cli.output import console as _console
from kernel_builder.cli.output import new_app
from kernel_builder.errors import UsageError

ci_app = new_app("Continuous integration for kernel repos: write a GitHub Actions workflow, and the steps it runs.")


def _positive_shards(shards: Optional[int]) -> None:

    if shards is not None and shards < 1:
        raise UsageError(f"--shards {shards}: use a positive number of build jobs")


def _parse_gpu_runners(values: List[str]) -> tuple:

    pairs = []
    for value in values:
        backend, sep, label = value.partition("=")
        if not sep or not backend.strip() or not label.strip():
            raise UsageError(f"--gpu-runner {value!r}: expected BACKEND=LABEL, e.g. cuda=gpu-a100")
        pairs.append((backend.strip(), label.strip()))
    return tuple(pairs)


@ci_app.command()
def github(
    kernel_dir: Path = typer.Argument(Path("."), help="The kernel repo (holding build.toml)."),
    matrix: Optional[str] = typer.Option(
        None, "--matrix", "-m",
        help="The variants CI builds, as `kbuild build --matrix` takes them (default: 'os=linux arch=x86_64').",
    ),
    shards: Optional[int] = typer.Option(
        None, "--shards", help="Build in N jobs, each a `--shard I/N` of the selection (default: one job per variant)."
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
    force: bool = typer.Option(False, "--force", help="Replace an existing workflow."),
) -> None:
    """Write .github/workflows/kbuild.yml: plan; build each variant on the GitHub runner (`kbuild build --runner local`, one sccache cache shared through --shared-cache, default gha), or with --shared-cache none in kbuild's build images (`--runner docker`); test; publish tags v*.*.*."""
    from rich.markup import escape

    from kernel_builder.scaffold.ci_github import (
        DEFAULT_MATRIX,
        WorkflowOptions,
        write_workflow,
    )

    _positive_shards(shards)
    if not 1 <= build_timeout <= 360:
        raise UsageError(f"--build-timeout {build_timeout}: GitHub allows 1 to 360 minutes per job")
    options = WorkflowOptions(
        matrix=matrix if matrix is not None else DEFAULT_MATRIX,
        shards=shards,
        install=install,
        gpu_runners=_parse_gpu_runners(gpu_runner or []),
        build_timeout=build_timeout,
        shared_cache=shared_cache,
        sign=not no_sign,
    )
    from kernel_builder.kernel.manifest import load_manifest

    path = write_workflow(kernel_dir, options, force=force)
    console = _console()
    console.print(f"wrote {escape(str(path))}")
    hub = load_manifest(kernel_dir).general.hub
    if hub is None or not hub.repo_id:
        console.print(escape('note: the publish job needs [general.hub] repo-id = "ORG/NAME" in build.toml, '
                             "and an HF_TOKEN secret"))
    labels = sorted({label for _, label in options.gpu_runners})
    if labels:  # actionlint rejects runner labels it does not know; the repo's own config lists them
        console.print(f"note: for actionlint, list the runner labels {escape(', '.join(labels))} "
                      "in .github/actionlint.yaml (self-hosted-runner: labels: [...])")


@ci_app.command("matrix")
def matrix_command(
    plan_json: Path = typer.Argument(..., help="The output of `kbuild plan --matrix SEL --json`."),
    shards: Optional[int] = typer.Option(None, "--shards", help="Split the builds into N jobs, as `--shard I/N` does."),
) -> None:
    """Print the workflow's job matrices from a plan: one line of JSON {build, test, gpu, variants}."""
    from kernel_builder.scaffold.ci_github import job_matrices

    _positive_shards(shards)
    try:
        rows = json.loads(plan_json.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read the plan {plan_json}: {e}") from None
    if not isinstance(rows, list):
        raise UsageError(f"{plan_json} is not the output of `kbuild plan --json` (a list of rows)")
    sys.stdout.write(json.dumps(job_matrices(rows, shards), separators=(",", ":")) + "\n")


@ci_app.command()
def complete(
    build_dir: Path = typer.Argument(Path("build"), help="The folder the build artifacts were downloaded into."),
    expect: str = typer.Option(..., "--expect", help="The planned variants, space-separated."),
) -> None:
    """Fail unless BUILD_DIR holds exactly the planned variants (the publish job's check)."""
    from kernel_builder.scaffold.ci_github import check_complete

    present = check_complete(build_dir, expect.split())
    _console().print(f"complete: all {len(present)} planned variants are here")
