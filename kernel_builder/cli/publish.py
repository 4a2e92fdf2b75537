"""`kbuild publish`: a checked build to branch vMAJOR and tag vX.Y.Z of a Hub repo."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kernel_builder.cli.output import console as _console
from kernel_builder.cli.output import print_json


def publish(
    kernel_dir: Path = typer.Argument(Path("."), help="The kernel repo (holding build.toml and build/)."),
    tag: str = typer.Option(..., "--tag", "-t", help="The release, vMAJOR.MINOR.PATCH; MAJOR must be build.toml's version."),
    repo_id: Optional[str] = typer.Option(None, "--repo-id", help="ORG/NAME on the Hub (default: build.toml's [general.hub] repo-id)."),
    private: bool = typer.Option(False, "--private", help="Create the repo private (an existing repo keeps its visibility)."),
    create_pr: bool = typer.Option(False, "--create-pr", help="Open a pull request to branch vMAJOR instead of committing; no tag."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the branch, tag and files (with sizes); touch nothing."),
    force: bool = typer.Option(False, "--force", help="Move the tag if it exists already."),
    allow_dirty: bool = typer.Option(False, "--allow-dirty", help="Publish a build of uncommitted sources."),
    allow_api_break: bool = typer.Option(
        False, "--allow-api-break",
        help="Publish even if an op, layer or function of the previous release of this major is removed or changed."),
    add_variants: bool = typer.Option(
        False, "--add-variants",
        help="Add only the variants of build/ that branch vMAJOR lacks, keeping every file already there; "
        "a variant it has with other content is refused."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan (--dry-run) or the result as JSON."),
) -> None:
    """Publish every variant under build/ to branch vMAJOR of a Hub repo in one commit, tag it, and update the repo card."""
    from rich.markup import escape

    from kernel_builder.publish.release import plan_publish
    from kernel_builder.publish.release import publish as run_publish

    console = _console(stderr=True)
    plan = plan_publish(kernel_dir, tag, repo_id, allow_dirty, add_variants)
    if dry_run:
        if as_json:
            print_json(plan.to_json())
            return
        out = _console()
        out.print(f"would publish {escape(plan.repo_id)}: branch {plan.branch}, tag {plan.tag}, "
                  f"{len(plan.uploads)} files ({plan.size / 1e6:.2f} MB) in one commit")
        for upload in plan.uploads:
            out.print(f"  {upload.size:>12,}  {escape(upload.path_in_repo)}")
        if plan.base:
            out.print(f"  on top of {plan.base[:12]}, keeping {escape(', '.join(plan.kept))} as they are")
        out.print("  and README.md (the repo card) on main")
        return
    done = run_publish(plan, private=private, create_pr=create_pr, force=force, allow_api_break=allow_api_break,
                       say=(lambda line: None) if as_json else (lambda line: console.print(escape(line))))
    if as_json:
        from dataclasses import asdict

        print_json(asdict(done))
        return
    where = f"tag {done.tag}" if done.tag else f"pull request {done.pull_request}"
    console.print(f"published {escape(done.repo_id)} {where} at {done.commit[:12]} (branch {done.branch}, {done.repo_type} repo)")
