"""Which variants a version branch of a Hub kernel repo already has: the folder names under
its build/ (and their files), read with huggingface_hub (HF_ENDPOINT, HF_TOKEN as for every call).

A plan input: `kbuild plan --missing-from ORG/NAME@vN` plans only what the branch lacks, and
`kbuild publish --add-variants` (kernel_builder.publish.add_variants) adds only that. A
name counts as there when either of its spellings is (FORMATS.md: a legacy name and its
new-style twin are one build, and the runtime would load either), so a branch published with
legacy names never gets the same build again under new ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernel_builder.errors import KbuildError, UsageError
from kernel_builder.hub_names import repo_id_problem
from kernel_builder.runtime.hub import REPO_TYPES
from kernel_builder.variants import try_parse

# The repo type kbuild publishes kernels as, and the one it falls back to on a Hub without it
# (the order the runtime looks them up in).
REPO_TYPE, FALLBACK_REPO_TYPE = REPO_TYPES
_RELEASE_REF_RE = re.compile(r"^(?P<repo>[^@\s]+)@v(?P<major>\d+)$")


class HubReadError(KbuildError):
    """The Hub cannot tell what a branch holds (no such repo or branch, refused, unreachable)."""


@dataclass(frozen=True)
class BranchRef:
    repo_id: str
    major: int

    @property
    def branch(self) -> str:
        return f"v{self.major}"

    def __str__(self) -> str:
        return f"{self.repo_id}@{self.branch}"


def parse_branch_ref(text: str, option: str = "--missing-from") -> BranchRef:
    """`ORG/NAME@vN` -> BranchRef; anything else is a usage error naming the form."""
    match = _RELEASE_REF_RE.match(text.strip())
    if not match:
        raise UsageError(f"{option} {text!r}: expected ORG/NAME@vN, the version branch of a Hub repo (e.g. kernels-community/relu@v1)")
    problem = repo_id_problem(match["repo"])
    if problem:
        raise UsageError(f"{option} {text!r}: {problem} (the Hub's rule for ORG/NAME)")
    return BranchRef(match["repo"], int(match["major"]))


def spellings(name: str) -> set[str]:
    """`name` and, where it has one, its twin in the other naming style."""
    variant = try_parse(name)
    twin = variant.other_style() if variant is not None else None
    return {name} | ({twin.name} if twin is not None else set())


def is_on_branch(name: str, present: set[str]) -> bool:
    return bool(spellings(name) & present)


def repo_type_of(api, repo_id: str) -> str:
    """`kernel`, or `model` for a repo kbuild published to a Hub without kernel repos
    (kernel_builder.publish.release); a repo of neither type is a one-line error."""
    from huggingface_hub.errors import HfHubHTTPError

    last = None
    for repo_type in (REPO_TYPE, FALLBACK_REPO_TYPE):
        try:
            api.repo_info(repo_id, repo_type=repo_type)
            return repo_type
        except HfHubHTTPError as e:
            last = e
        except OSError as e:
            raise HubReadError(f"cannot reach the Hub to read {repo_id}: {e}") from None
    raise HubReadError(f"cannot read {repo_id} on the Hub: {hub_message(last)}")


def branch_head(api, ref: BranchRef, repo_type: str) -> str:
    """The commit at the tip of the version branch; a repo without it is a one-line error."""
    refs = call(lambda: api.list_repo_refs(ref.repo_id, repo_type=repo_type), f"list the refs of {ref.repo_id}", ref.repo_id)
    heads = {b.name: b.target_commit for b in refs.branches}
    if ref.branch not in heads:
        raise HubReadError(f"{ref.repo_id} has no branch {ref.branch}: nothing is released in version {ref.major} yet "
                           f"(publish a first release with `kbuild publish --tag {ref.branch}.0.0`)")
    return heads[ref.branch]


def branch_files(api, repo_id: str, repo_type: str, revision: str) -> dict[str, dict[str, object]]:
    """variant -> {path relative to its folder: the Hub's RepoFile} for build/ at `revision`."""
    from huggingface_hub.errors import EntryNotFoundError
    from huggingface_hub.hf_api import RepoFile

    try:
        entries = call(lambda: [e for e in api.list_repo_tree(repo_id, path_in_repo="build", revision=revision,
                                                                repo_type=repo_type, recursive=True)
                                 if isinstance(e, RepoFile)],
                        f"list the files of {repo_id}@{revision[:12]}", repo_id)
    except EntryNotFoundError:  # a branch without build/ has no variants
        return {}
    found: dict[str, dict[str, object]] = {}
    for entry in entries:
        parts = entry.path.split("/", 2)
        if len(parts) == 3:
            found.setdefault(parts[1], {})[parts[2]] = entry
    return found


def variants_on_branch(ref: BranchRef) -> set[str]:
    """The variant folder names under build/ on `ref`'s branch."""
    from huggingface_hub import HfApi

    api = HfApi()
    repo_type = repo_type_of(api, ref.repo_id)
    return set(branch_files(api, ref.repo_id, repo_type, branch_head(api, ref, repo_type)))


def same_files(uploads, remote: dict) -> bool:
    """Whether the Hub's files `remote` (path_in_repo -> RepoFile) are exactly `uploads` (each
    with local, path_in_repo and size: kernel_builder.publish.release.Upload), byte for byte,
    compared by the ids the Hub lists: sha256 for LFS files, the git blob id for the others."""
    from huggingface_hub.utils.sha import git_hash, sha_fileobj

    if set(remote) != {u.path_in_repo for u in uploads}:
        return False
    for upload in uploads:
        entry = remote[upload.path_in_repo]
        if entry.size != upload.size:
            return False
        if entry.lfs is not None:
            with open(upload.local, "rb") as f:
                if sha_fileobj(f).hex() != entry.lfs.sha256:
                    return False
        elif git_hash(upload.local.read_bytes()) != entry.blob_id:
            return False
    return True


def call(action, doing: str, repo_id: str, error=None):
    """`action()`, with the Hub's refusal as one line: `error(e, doing, repo_id)` (default a
    HubReadError). A missing file (EntryNotFoundError) passes through for callers to which that
    is an answer."""
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError

    try:
        return action()
    except EntryNotFoundError:
        raise
    except HfHubHTTPError as e:
        raise (error(e, doing, repo_id) if error else HubReadError(f"cannot {doing}: {hub_message(e)}")) from None


def hub_message(error) -> str:
    """What the Hub said (its X-Error-Message / error body), else the error's first real line:
    huggingface_hub puts '(Request ID: ...)' first, which says nothing about the cause."""
    server = (getattr(error, "server_message", None) or "").strip()
    if server:
        return server.splitlines()[0]
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith("(Request ID:")]
    return (useful or lines or [type(error).__name__])[0]


def next_patch_tag(ref: BranchRef) -> str:
    """The tag for adding variants to `ref`'s branch (`kbuild publish --add-variants --tag`):
    vMAJOR.MINOR.(PATCH+1) after the newest tag of that major on the Hub."""
    from huggingface_hub import HfApi

    api = HfApi()
    repo_type = repo_type_of(api, ref.repo_id)
    refs = call(lambda: api.list_repo_refs(ref.repo_id, repo_type=repo_type), f"list the refs of {ref.repo_id}", ref.repo_id)
    released = [(int(m["minor"]), int(m["patch"])) for tag in refs.tags
                if (m := re.fullmatch(rf"v{ref.major}\.(?P<minor>\d+)\.(?P<patch>\d+)", tag.name))]
    if not released:
        raise HubReadError(f"{ref.repo_id} has no release tag v{ref.major}.x.y to add variants to "
                           f"(publish a first release with `kbuild publish --tag {ref.branch}.0.0`)")
    minor, patch = max(released)
    return f"{ref.branch}.{minor}.{patch + 1}"
