"""`kbuild publish --add-variants --tag vX.Y.Z`: a release plan cut to the variants of build/
that branch vX of the Hub repo lacks, with the card listing every variant of the branch;
kernel_builder.publish.release commits them on top of the branch, tags vX.Y.Z and writes the card.

What a release already has is never touched: no file is deleted or replaced, and a variant of
build/ that the branch has with other bytes (or under its other-style name) is refused, since
users pinned to that release would silently load another build. That is how a new torch or CUDA
release gets its variants without rebuilding, re-uploading or re-hashing the ones users have.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from kernel_builder.errors import KbuildError
from kernel_builder.pipeline.hub_variants import (
    BranchRef, branch_files, branch_head, call, repo_type_of, same_files, spellings,
)
from kernel_builder.publish.repo_card import render_card
from kernel_builder.runtime.loader import read_metadata


class AddVariantsError(KbuildError):
    """build/ cannot be added to the release: it would change what the release has."""


def narrow(plan):
    """`plan` (a release.PublishPlan of every variant of build/, checked) cut to the variants its
    branch lacks; the card lists the branch's variants and those. Reads the Hub, writes nothing."""
    from huggingface_hub import HfApi

    api = HfApi()
    ref = BranchRef(plan.repo_id, plan.manifest.general.version)
    repo_type = repo_type_of(api, plan.repo_id)
    head = branch_head(api, ref, repo_type)
    remote = branch_files(api, plan.repo_id, repo_type, head)
    if not remote:
        raise AddVariantsError(f"{ref} has no variants under build/ to add to: publish it whole with "
                           f"`kbuild publish --tag {plan.tag}`")
    added, changed = [], []
    for folder in plan.variants:
        if folder.name in remote:
            released = {f"build/{folder.name}/{path}": entry for path, entry in remote[folder.name].items()}
            ours = tuple(u for u in plan.build_uploads if u.path_in_repo.startswith(f"build/{folder.name}/"))
            if not same_files(ours, released):
                changed.append(folder.name)
            continue
        twins = sorted((spellings(folder.name) - {folder.name}) & set(remote))
        if twins:
            raise AddVariantsError(f"build/{folder.name} is on {ref} already as {twins[0]} (the same build in the other "
                               "naming style): delete it from build/")
        added.append(folder)
    if changed:
        raise AddVariantsError(f"{', '.join(changed)} on {ref} differ from build/: --add-variants never changes a released "
                           "variant; delete them from build/ (or publish a new version without --add-variants)")
    names = {folder.name for folder in added}
    metadata = [read_metadata(folder) | {"variant": folder.name} for folder in added]
    metadata += [_released_metadata(api, plan.repo_id, repo_type, head, name) | {"variant": name} for name in sorted(remote)]
    return replace(
        plan, variants=tuple(added), uploads=tuple(u for u in plan.build_uploads if u.path_in_repo.split("/")[1] in names),
        card=render_card(plan.manifest, plan.repo_id, metadata, plan.branch, plan.tag),
        base=head, repo_type=repo_type, kept=tuple(sorted(remote)),
    )


def _released_metadata(api, repo_id: str, repo_type: str, sha: str, variant: str) -> dict:
    """build/<variant>/metadata.json at `sha`, for the card ({} where it has none)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    path = f"build/{variant}/metadata.json"
    try:
        local = call(lambda: hf_hub_download(repo_id, path, repo_type=repo_type, revision=sha, token=api.token),
                      f"read {path} of {repo_id}@{sha[:12]}", repo_id)
    except EntryNotFoundError:
        return {}
    try:
        return json.loads(Path(local).read_text())
    except ValueError:
        return {}
