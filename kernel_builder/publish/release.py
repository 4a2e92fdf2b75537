"""`kbuild publish --tag vX.Y.Z`: every built variant to branch `vX` of a Hub repo in one
commit, tagged `vX.Y.Z`, and the repo card on `main`.

The order makes a failure at any point safe to re-run: the repo and branch are created
if missing; the commit holds every file of build/ and the kernel's benchmarks/benchmark*.py
(the Hub applies a commit whole, so a killed upload leaves no half commit), and files
already identical on the branch are not sent again; the tag is created on that commit, and an existing tag is never moved without
`force`. The card is a separate commit on `main`, after the tag: a run killed between the
two is finished by the next run, which finds the tag on exactly this build and the card
missing (or older), and writes only the card.

With --add-variants the commit adds only the variants the branch lacks, on top of it, and
deletes nothing (kernel_builder.publish.add_variants cuts the plan).

huggingface_hub is imported only here, when publishing: `HF_TOKEN` (or the login) gives
the token and `HF_ENDPOINT` the server, as for every huggingface_hub call.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fnmatch import fnmatch
from dataclasses import dataclass
from pathlib import Path

from kernel_builder.checks.kernel_benchmarks import SCRIPTS
from kernel_builder.checks.variant_checks import check_build, variant_folders
from kernel_builder.formatting import first_line
from kernel_builder.errors import KbuildError, UsageError
from kernel_builder.hub_names import repo_id_problem
from kernel_builder.kernel.identity import DIRTY, kernel_identity
from kernel_builder.kernel.manifest import Manifest, load_manifest
from kernel_builder.pipeline.hub_variants import FALLBACK_REPO_TYPE, REPO_TYPE, call, hub_message, same_files
from kernel_builder.publish.add_variants import narrow
from kernel_builder.publish.api_diff import Api, breaks, describe_breaks, local_api, previous_release
from kernel_builder.publish.repo_card import card_release, later_release, render_card
from kernel_builder.publish.signing import stale_signatures
from kernel_builder.runtime.loader import read_metadata

TAG_RE = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")
# Where `kernels benchmark ORG/NAME@vN` looks for the scripts on the version branch; kernel-builder's
# upload puts the kernel's top-level benchmarks/benchmark*.py there, file name kept.
BENCHMARKS = "benchmarks"


class PublishError(KbuildError):
    """A publish that must not go ahead; the message says what to fix."""


@dataclass(frozen=True)
class Upload:
    local: Path
    path_in_repo: str  # build/<variant>/<file>, or benchmarks/benchmark*.py
    size: int

    @property
    def is_build(self) -> bool:
        return self.path_in_repo.startswith("build/")


@dataclass(frozen=True)
class PublishPlan:
    manifest: Manifest
    repo_id: str
    branch: str  # v1
    tag: str  # v1.2.0
    variants: tuple[Path, ...]
    uploads: tuple[Upload, ...]
    card: str
    # --add-variants (kernel_builder.publish.add_variants): the branch commit the variants are
    # added to, the repo's type, and the variants already there, which stay as they are.
    base: str | None = None
    repo_type: str | None = None
    kept: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return sum(u.size for u in self.uploads)

    @property
    def build_uploads(self) -> tuple[Upload, ...]:
        """The files of build/, what makes a release (the benchmarks only travel with it)."""
        return tuple(u for u in self.uploads if u.is_build)

    def to_json(self) -> dict:
        return {
            "repo_id": self.repo_id, "branch": self.branch, "tag": self.tag,
            "variants": [v.name for v in self.variants],
            "files": [{"path": u.path_in_repo, "size": u.size} for u in self.uploads],
            "size": self.size,
        } | ({"add_to": self.base, "kept": list(self.kept)} if self.base else {})


@dataclass(frozen=True)
class Published:
    repo_id: str
    repo_type: str
    branch: str
    tag: str | None  # None with create_pr (tag after the merge)
    commit: str
    uploaded: bool  # False: every file was already identical on the branch
    pull_request: str | None = None


def parse_tag(tag: str, version: int) -> tuple[int, int, int]:
    match = TAG_RE.match(tag)
    if not match:
        raise UsageError(f"--tag {tag!r}: expected vMAJOR.MINOR.PATCH, e.g. v{version}.0.0")
    numbers = _numbers(match)
    if numbers[0] != version:
        raise UsageError(
            f"--tag {tag}: its major version {numbers[0]} must equal build.toml's [general] version = {version} "
            f"(tag v{version}.x.y, or raise the version in build.toml and rebuild)")
    return numbers


def _repo_id(manifest: Manifest, repo_id: str | None) -> str:
    chosen = repo_id or (manifest.general.hub.repo_id if manifest.general.hub else None)
    if not chosen:
        raise UsageError(f"no repo id for '{manifest.name}': pass --repo-id ORG/NAME or set [general.hub] repo-id in build.toml")
    # Checked here, before any call: huggingface_hub would raise HFValidationError mid-publish.
    problem = repo_id_problem(chosen)
    if problem:
        source = "--repo-id" if repo_id else f"{manifest.root / 'build.toml'}: [general.hub] repo-id"
        raise UsageError(f"{source} {chosen!r}: {problem} (the Hub's rule for ORG/NAME)")
    return chosen


def plan_publish(
    kernel_dir: Path, tag: str, repo_id: str | None = None, allow_dirty: bool = False, add_variants: bool = False,
) -> PublishPlan:
    """Everything publishing would do, decided without touching the Hub: which variants and
    files go to which branch and tag, and the card. Refuses what must not be published.
    With `add_variants`, only the variants the branch lacks, read from the Hub
    (kernel_builder.publish.add_variants)."""
    manifest = load_manifest(kernel_dir)
    major, _, _ = parse_tag(tag, manifest.general.version)
    repo = _repo_id(manifest, repo_id)
    out = manifest.root / "build"
    if not out.is_dir():
        raise PublishError(f"nothing to publish: {out} does not exist; run `kbuild build {kernel_dir}` first")
    variants = variant_folders(out)
    _refuse_stale_or_dirty(manifest, out, variants, allow_dirty)
    resign = stale_signatures(variants)
    if resign:
        raise PublishError(
            f"the signature of {', '.join(resign)} no longer matches its metadata.json (rebuilt after signing): "
            f"sign again with `kbuild sign {out}`, or delete its metadata.json.sigstore"
        )
    failed = [r for r in check_build(out) if not r.ok]
    if failed:
        findings = "; ".join(
            f"{r.folder.name}: {c.check}: {c.detail}" for r in failed for c in r.results if c.status == "failed"
        )
        raise PublishError(f"refusing to publish builds that fail `kbuild check`: {findings}")
    uploads = tuple(
        Upload(path, f"build/{folder.name}/{path.relative_to(folder).as_posix()}", path.stat().st_size)
        for folder in variants
        for path in sorted(folder.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and not path.name.endswith(".pyc")
    ) + tuple(
        Upload(path, f"{BENCHMARKS}/{path.name}", path.stat().st_size)
        for path in sorted((manifest.root / BENCHMARKS).glob(SCRIPTS))
        if path.is_file()
    )
    card = render_card(manifest, repo, [read_metadata(v) | {"variant": v.name} for v in variants], f"v{major}", tag)
    plan = PublishPlan(manifest, repo, f"v{major}", tag, tuple(variants), uploads, card)
    return narrow(plan) if add_variants else plan


def _refuse_stale_or_dirty(manifest: Manifest, out: Path, variants: list[Path], allow_dirty: bool) -> None:
    """Every variant must come from the source as it is now, and (unless allow_dirty) from a
    commit: a build's op id ends with the id of what it read (kernel.identity), `_dirty` when uncommitted."""
    current, state = kernel_identity(manifest)
    metadata = {v.name: read_metadata(v) for v in variants}
    stale = [name for name, meta in metadata.items() if not meta["id"].endswith(f"_{current}")]
    if stale:
        raise PublishError(
            f"build/ does not match the source: {', '.join(stale)} were built from other sources; "
            f"rebuild with `kbuild build {manifest.root}` (and delete variants you no longer build)"
        )
    if allow_dirty:
        return
    if current.endswith(DIRTY):
        raise PublishError(
            f"{manifest.root} has uncommitted changes to files the build reads: commit them and rebuild, or pass --allow-dirty"
        )
    if state is None:
        raise PublishError(
            f"{manifest.root} is not in a git repository, so the build records no commit: "
            "commit it to git and rebuild, or pass --allow-dirty"
        )
    # Same sources, built before the first commit: the id matches, the provenance lacks it.
    uncommitted = [name for name, meta in metadata.items() if not meta["provenance"].get("kernel")]
    if uncommitted:
        raise PublishError(
            f"{', '.join(uncommitted)} record no git commit (built before the kernel was committed): "
            f"rebuild with `kbuild build {manifest.root}`, or pass --allow-dirty"
        )


def publish(
    plan: PublishPlan,
    *,
    private: bool = False,
    create_pr: bool = False,
    force: bool = False,
    allow_api_break: bool = False,
    say: Callable[[str], None] = lambda line: None,
) -> Published:
    """Carry out `plan` against the Hub (HF_ENDPOINT) with the configured token. A release that
    removes or changes what the previous release of its major has is refused unless
    `allow_api_break` (kernel_builder.publish.api_diff). A plan made with add_variants adds
    its variants to the branch and touches nothing else (kernel_builder.publish.add_variants)."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi
    from huggingface_hub.errors import HfHubHTTPError

    if plan.base is not None and (create_pr or force):
        raise UsageError(f"--add-variants adds to {plan.repo_id}@{plan.branch} with a new tag: "
                         f"{'--create-pr' if create_pr else '--force'} does not go with it")
    api = HfApi()
    _check_token(api)
    if plan.base is not None:
        return _add_variants(api, plan, say)
    repo_type = _create_repo(api, plan.repo_id, private, say)
    refs = _call(lambda: api.list_repo_refs(plan.repo_id, repo_type=repo_type), f"list the refs of {plan.repo_id}", plan.repo_id)
    tags = {t.name: t.target_commit for t in refs.tags}
    if plan.tag in tags and not force:
        if create_pr:
            raise PublishError(f"tag {plan.tag} already exists on {plan.repo_id} (commit {tags[plan.tag][:12]}); "
                               "publish a new version, or pass --force to move it")
        return _finish_tagged(api, plan, repo_type, tags[plan.tag], say)
    if not allow_api_break:
        _refuse_api_break(api, plan, repo_type, tags, say)
    branches = {b.name: b.target_commit for b in refs.branches}
    if plan.branch not in branches:
        _call(lambda: api.create_branch(plan.repo_id, branch=plan.branch, repo_type=repo_type, exist_ok=True),
              f"create branch {plan.branch}", plan.repo_id)
        say(f"created branch {plan.branch}")
    head = branches.get(plan.branch)
    # The branch's build/ becomes exactly build/ (files of variants no longer built are deleted),
    # and its benchmark scripts exactly the kernel's: a script the kernel dropped is deleted too.
    wanted = {u.path_in_repo for u in plan.uploads}
    existing = _branch_files(api, plan.repo_id, repo_type, plan.branch) if head else set()
    operations = [CommitOperationAdd(path_in_repo=u.path_in_repo, path_or_fileobj=str(u.local)) for u in plan.uploads]
    operations += [CommitOperationDelete(path_in_repo=p) for p in sorted(existing - wanted)
                   if p.startswith("build/") or _is_benchmark_script(p)]
    benchmarks = len(plan.uploads) - len(plan.build_uploads)
    say(f"uploading {len(plan.build_uploads)} files of {len(plan.variants)} variants"
        + (f" and {benchmarks} benchmark scripts" if benchmarks else "")
        + f" ({plan.size / 1e6:.1f} MB) to {plan.repo_id}@{plan.branch}")
    try:
        commit = api.create_commit(
            plan.repo_id, operations, commit_message=f"{plan.manifest.name} {plan.tag}",
            commit_description=f"Variants: {', '.join(v.name for v in plan.variants)}",
            repo_type=repo_type, revision=plan.branch, create_pr=create_pr, parent_commit=head,
        )
    except HfHubHTTPError as e:
        raise _hub_error(e, f"commit to {plan.repo_id}@{plan.branch}", plan.repo_id) from None
    sha = commit.oid
    uploaded = sha != head
    if create_pr:
        say(f"opened {commit.pr_url}; tag {plan.tag} is not created until it is merged")
        return Published(plan.repo_id, repo_type, plan.branch, None, sha, uploaded, commit.pr_url)
    if not uploaded:
        say(f"every file is already on {plan.branch}: nothing uploaded")
    if plan.tag in tags:  # force: move it
        _call(lambda: api.delete_tag(plan.repo_id, tag=plan.tag, repo_type=repo_type), f"delete tag {plan.tag}", plan.repo_id)
    _call(lambda: api.create_tag(plan.repo_id, tag=plan.tag, revision=sha, repo_type=repo_type,
                                 tag_message=f"{plan.manifest.name} {plan.tag}"), f"create tag {plan.tag}", plan.repo_id)
    say(f"tagged {sha[:12]} as {plan.tag}")
    _upload_card(api, plan, repo_type, _card_on_main(api, plan, repo_type), say)
    return Published(plan.repo_id, repo_type, plan.branch, plan.tag, sha, uploaded)


def _refuse_api_break(api, plan: PublishPlan, repo_type: str, tags: dict[str, str], say: Callable[[str], None]) -> None:
    """Compare the plan's API with the previous release of its major, read from that tag's
    symbols.json files; refuse what it removes or changes."""
    releases = {name: _numbers(match) for name in tags if (match := TAG_RE.match(name))}
    previous = previous_release(parse_tag(plan.tag, plan.manifest.general.version), releases)
    if previous is None:
        return
    found = breaks(_release_api(api, plan.repo_id, repo_type, tags[previous]), local_api(plan.variants))
    if found:
        raise PublishError(describe_breaks(plan.tag, previous, found))
    say(f"the API keeps everything {previous} has")


def _numbers(match: re.Match) -> tuple[int, int, int]:
    return tuple(int(n) for n in match.groups())  # type: ignore[return-value]


def _release_api(api, repo_id: str, repo_type: str, sha: str) -> Api:
    """The API of the release at commit `sha`: its build/<variant>/symbols.json files."""
    import json

    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError
    from huggingface_hub.hf_api import RepoFile

    try:
        paths = _call(lambda: [e.path for e in api.list_repo_tree(repo_id, path_in_repo="build", revision=sha,
                                                                   repo_type=repo_type, recursive=True)
                               if isinstance(e, RepoFile) and e.path.count("/") == 2 and e.path.endswith("/symbols.json")],
                      f"list the files of {repo_id}@{sha[:12]}", repo_id)
    except EntryNotFoundError:
        return Api.merged(())
    return Api.merged(
        json.loads(Path(_call(lambda: hf_hub_download(repo_id, path, repo_type=repo_type, revision=sha, token=api.token),
                              f"read {path} of {repo_id}@{sha[:12]}", repo_id)).read_text())
        for path in paths
    )


def _upload_card(api, plan: PublishPlan, repo_type: str, current: str | None, say: Callable[[str], None]) -> None:
    """The plan's card on main, unless `current` (the card there) names a later release."""
    later = later_release(current, plan.tag)
    if later is not None:
        say(f"the card on main stays at {later}: it is never written over by an older release ({plan.tag})")
        return
    _call(lambda: api.upload_file(path_or_fileobj=plan.card.encode(), path_in_repo="README.md", repo_id=plan.repo_id,
                                  repo_type=repo_type, revision="main", commit_message=f"Card for {plan.tag}"),
          f"update the card of {plan.repo_id}", plan.repo_id)


def _finish_tagged(api, plan: PublishPlan, repo_type: str, sha: str, say: Callable[[str], None]) -> Published:
    """The tag exists: finish the steps after it (the card) when it holds exactly this build,
    as a run killed after tagging leaves it; refuse a tag on other content, or one with
    nothing left to do."""
    where = f"tag {plan.tag} already exists on {plan.repo_id} (commit {sha[:12]})"
    if not _holds_build(api, plan, repo_type, sha):
        raise PublishError(f"{where} with other content than build/; publish a new version, "
                           "or pass --force to move it")
    return _finish_card(api, plan, repo_type, sha, f"{where} with this build", "publish a new version, or pass --force to move it", say)


def _finish_card(api, plan: PublishPlan, repo_type: str, sha: str, where: str, instead: str,
                 say: Callable[[str], None]) -> Published:
    """The tag is on this build already: write the card, unless the card on main is for this
    release or a later one (a late re-run never rolls the card back)."""
    current = _card_on_main(api, plan, repo_type)
    release = card_release(current) if current is not None else None
    ours = parse_tag(plan.tag, plan.manifest.general.version)
    if current == plan.card or (release is not None and release[1] >= ours):
        shown = release[0] if release else plan.tag
        raise PublishError(f"{where}, and the card on main is current (latest release {shown}): "
                           f"nothing left to do; {instead}")
    say(f"tag {plan.tag} is already on {sha[:12]} with this build: finishing what an earlier run left undone "
        "(the repo card)")
    _upload_card(api, plan, repo_type, current, say)
    return Published(plan.repo_id, repo_type, plan.branch, plan.tag, sha, uploaded=False)


def _add_variants(api, plan: PublishPlan, say: Callable[[str], None]) -> Published:
    """A plan cut by add_variants.narrow: one commit of its variants on top of `plan.base` (the
    Hub refuses it if the branch moved since), the tag on it, then the card. Nothing on the
    branch is deleted or replaced.

    Re-running is safe: the commit's title names the tag, so a run killed after its commit
    (before the tag) is finished by the next, which finds nothing left to add and that commit
    on top, and tags it; one killed after the tag writes only the card."""
    from huggingface_hub import CommitOperationAdd
    from huggingface_hub.errors import HfHubHTTPError

    repo_type = plan.repo_type or REPO_TYPE
    where = f"{plan.repo_id}@{plan.branch}"
    title = f"{plan.manifest.name} {plan.tag}: added variants"
    refs = _call(lambda: api.list_repo_refs(plan.repo_id, repo_type=repo_type), f"list the refs of {plan.repo_id}", plan.repo_id)
    tags = {t.name: t.target_commit for t in refs.tags}
    if plan.tag in tags:
        exists = f"tag {plan.tag} already exists on {plan.repo_id} (commit {tags[plan.tag][:12]})"
        if tags[plan.tag] == plan.base and not plan.variants:
            return _finish_card(api, plan, repo_type, plan.base, f"{exists} with these variants",
                                "add new variants as a new version", say)
        raise PublishError(f"{exists}; add the variants as a new version")
    if plan.variants:
        say(f"adding {len(plan.variants)} variants ({', '.join(v.name for v in plan.variants)}, {len(plan.uploads)} files, "
            f"{plan.size / 1e6:.1f} MB) to {where}, beside the {len(plan.kept)} already there")
        try:
            sha = api.create_commit(
                plan.repo_id, [CommitOperationAdd(path_in_repo=u.path_in_repo, path_or_fileobj=str(u.local)) for u in plan.uploads],
                commit_message=title, commit_description=f"Added: {', '.join(v.name for v in plan.variants)}",
                repo_type=repo_type, revision=plan.branch, parent_commit=plan.base,
            ).oid
        except HfHubHTTPError as e:
            raise _hub_error(e, f"commit to {where}", plan.repo_id) from None
    elif _head_title(api, plan, repo_type) == title:
        sha = plan.base
        say(f"{where} already holds the variants added for {plan.tag}: tagging it")
    else:
        raise PublishError(f"nothing to add: every variant of build/ is on {where} already; "
                           f"build the missing ones first (`kbuild plan --missing-from {where}`)")
    _call(lambda: api.create_tag(plan.repo_id, tag=plan.tag, revision=sha, repo_type=repo_type, tag_message=title),
          f"create tag {plan.tag}", plan.repo_id)
    say(f"tagged {sha[:12]} as {plan.tag}")
    _upload_card(api, plan, repo_type, _card_on_main(api, plan, repo_type), say)
    return Published(plan.repo_id, repo_type, plan.branch, plan.tag, sha, uploaded=bool(plan.variants))


def _head_title(api, plan: PublishPlan, repo_type: str) -> str | None:
    """The title of the commit the plan adds to (the branch's head when it was planned)."""
    commits = _call(lambda: api.list_repo_commits(plan.repo_id, repo_type=repo_type, revision=plan.base),
                    f"list the commits of {plan.repo_id}", plan.repo_id)
    return commits[0].title if commits else None


def _is_benchmark_script(path_in_repo: str) -> bool:
    """A benchmarks/**/benchmark*.py file on the branch (kernel-builder deletes those it no longer has)."""
    return path_in_repo.startswith(f"{BENCHMARKS}/") and fnmatch(path_in_repo.rsplit("/", 1)[1], SCRIPTS)


def _holds_build(api, plan: PublishPlan, repo_type: str, sha: str) -> bool:
    """Whether commit `sha`'s build/ is exactly the plan's build files, byte for byte (compared by
    the ids the Hub lists: sha256 for LFS files, the git blob id for the others). The benchmark
    scripts are not compared: they are no part of what the tag releases."""
    from huggingface_hub.errors import EntryNotFoundError
    from huggingface_hub.hf_api import RepoFile

    try:
        entries = _call(lambda: [e for e in api.list_repo_tree(plan.repo_id, path_in_repo="build", revision=sha,
                                                                repo_type=repo_type, recursive=True)
                                 if isinstance(e, RepoFile)],
                        f"list the files of {plan.repo_id}@{sha[:12]}", plan.repo_id)
    except EntryNotFoundError:
        return False
    return same_files(plan.build_uploads, {e.path: e for e in entries})


def _card_on_main(api, plan: PublishPlan, repo_type: str) -> str | None:
    """README.md on main, or None when there is none."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    try:
        path = _call(lambda: hf_hub_download(plan.repo_id, "README.md", repo_type=repo_type, revision="main",
                                             token=api.token),
                     f"read the card of {plan.repo_id}", plan.repo_id)
    except EntryNotFoundError:
        return None
    return Path(path).read_text(encoding="utf-8", errors="replace")


def _check_token(api) -> None:
    """A missing or rejected token, in one line, before anything is sent."""
    from huggingface_hub import constants
    from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError

    try:
        api.whoami()
    except LocalTokenNotFoundError:
        raise PublishError("no Hugging Face token: set HF_TOKEN or run `hf auth login`") from None
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else "?"
        raise PublishError(f"{constants.ENDPOINT} rejected the Hugging Face token (HTTP {status}): "
                           "check HF_TOKEN or run `hf auth login` again") from None
    except OSError as e:
        raise PublishError(f"cannot reach {constants.ENDPOINT}: {first_line(e)}") from None


def _create_repo(api, repo_id: str, private: bool, say: Callable[[str], None]) -> str:
    """Create the repo (or find it) as a kernel repo; a server that does not know that type
    gets a model repo, with a warning."""
    from huggingface_hub.errors import HfHubHTTPError

    try:
        api.create_repo(repo_id, repo_type=REPO_TYPE, private=private, exist_ok=True)
        return REPO_TYPE
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else None
        if status not in (400, 404, 422):
            raise _hub_error(e, f"create {repo_id}", repo_id) from None
        say(f"warning: the Hub rejected repo type '{REPO_TYPE}' ({hub_message(e)}); publishing {repo_id} as a model repo")
    _call(lambda: api.create_repo(repo_id, repo_type=FALLBACK_REPO_TYPE, private=private, exist_ok=True), f"create {repo_id}", repo_id)
    return FALLBACK_REPO_TYPE


def _branch_files(api, repo_id: str, repo_type: str, branch: str) -> set[str]:
    entries = _call(lambda: list(api.list_repo_tree(repo_id, revision=branch, repo_type=repo_type, recursive=True)),
                    f"list the files of {repo_id}@{branch}", repo_id)
    from huggingface_hub.hf_api import RepoFile

    return {e.path for e in entries if isinstance(e, RepoFile)}


def _call(action, doing: str, repo_id: str):
    """hub_variants.call, with a refusal as a PublishError (a 403 says the token cannot write)."""
    return call(action, doing, repo_id, _hub_error)


def _hub_error(error, doing: str, repo_id: str) -> PublishError:
    """A Hub refusal in one line. A 403 is the Hub saying the token lacks write access (a
    read token, or a fine-grained one without this repo): say that, not a request id."""
    status = error.response.status_code if error.response is not None else None
    if status == 403:
        return PublishError(f"this token cannot write to {repo_id} ({hub_message(error)}); use a token with "
                            "write access to it (HF_TOKEN, or `hf auth login`)")
    return PublishError(f"cannot {doing}: {hub_message(error)}")
