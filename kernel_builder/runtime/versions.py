"""Which commit of a kernel repo to load: parse what the caller asked for and resolve it
against the repo's branches and tags.

What a caller may ask for (FORMATS.md, "Versions on the Hub"):

- `version=N` (an int): the head of branch `vN`, where a kernel's major version N lives;
- `"org/name@v2.1.0"` or `revision="v2.1.0"`: a tag, a branch or a commit sha;
- `"org/name@>=2.0,<3.0"` or `version=">=2.0,<3.0"`: the highest release tag (tags named
  `vX.Y.Z`, compared as PEP 440 versions) that the specifier set admits. Pre-releases
  count only when the specifier names one, as pip does.

Standard library only; `packaging` is imported when a range is resolved.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kernel_builder.runtime.loader import KernelLoadError

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_REPO_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
_RANGE_START = ("<", ">", "=", "!", "~")
_TAG_RE = re.compile(r"^v\d+(\.\d+)*([-.]?[A-Za-z0-9.+-]*)?$")
_MAX_LISTED = 20


class KernelVersionError(KernelLoadError):
    """The requested version, tag, range or revision does not exist in the repo (or is
    malformed); the message lists what does exist."""


@dataclass(frozen=True)
class KernelRequest:
    """What to load: `kind` is "version" (`value` is N, read branch vN), "range" (`value` is
    a PEP 440 specifier set over vX.Y.Z tags) or "revision" (a tag, branch or commit)."""

    repo_id: str
    kind: str
    value: int | str

    def describe(self) -> str:
        """How the request reads in messages: `org/name v2`, `org/name@>=1,<2`, `org/name@v1.0.0`."""
        if self.kind == "version":
            return f"{self.repo_id} version {self.value} (branch v{self.value})"
        return f"{self.repo_id}@{self.value}"


@dataclass(frozen=True)
class Refs:
    """A repo's branches and tags, each name -> commit sha."""

    branches: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"branches": dict(sorted(self.branches.items())), "tags": dict(sorted(self.tags.items()))}

    @classmethod
    def from_json(cls, data: object) -> Refs:
        if not isinstance(data, dict):
            return cls()
        def table(key: str) -> dict[str, str]:
            value = data.get(key)
            if not isinstance(value, dict):
                return {}
            return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str) and COMMIT_RE.match(v)}
        return cls(branches=table("branches"), tags=table("tags"))


@dataclass(frozen=True)
class Resolved:
    """The outcome: the ref that matched (`v1`, `v1.1.0`, a sha) and its commit."""

    ref: str
    sha: str


def check_repo_id(repo_id: object) -> str:
    if not isinstance(repo_id, str) or not _REPO_ID_RE.match(repo_id):
        raise KernelVersionError(
            f"invalid kernel repo id {repo_id!r}: expected 'org/name', optionally with '@<tag>' or '@<range>' "
            "(e.g. 'kernels-community/relu@v1.0.0' or 'kernels-community/relu@>=1.0,<2.0')"
        )
    return repo_id


def is_range(text: str) -> bool:
    return text.lstrip().startswith(_RANGE_START)


def parse_request(spec: str, version: int | str | None = None, revision: str | None = None) -> KernelRequest:
    """Combine `"org/name[@ref-or-range]"`, `version=` and `revision=` into one request;
    more than one of the three ways to pick a version is an error, and so is none."""
    if not isinstance(spec, str):
        raise KernelVersionError(f"the kernel must be named by a string 'org/name', got {type(spec).__name__}")
    repo_id, at, suffix = spec.strip().partition("@")
    repo_id = check_repo_id(repo_id.strip())
    suffix = suffix.strip()
    if at and not suffix:
        raise KernelVersionError(f"'{spec}' has nothing after '@'; write e.g. '{repo_id}@v1.0.0' or '{repo_id}@>=1.0,<2.0'")

    chosen = [name for name, given in (("'@'", bool(at)), ("version=", version is not None), ("revision=", revision is not None)) if given]
    if len(chosen) > 1:
        raise KernelVersionError(f"pick the version of {repo_id} one way only, not with {' and '.join(chosen)}")
    if not chosen:
        raise KernelVersionError(
            f"say which version of {repo_id} to load: version=N (branch vN), '{repo_id}@v1.2.0' (a tag), "
            f"'{repo_id}@>=1.0,<2.0' (the newest matching tag) or revision=<branch, tag or commit>"
        )

    if at:
        return KernelRequest(repo_id, "range" if is_range(suffix) else "revision", suffix)
    if revision is not None:
        if not isinstance(revision, str) or not revision.strip():
            raise KernelVersionError(f"revision= must be a non-empty string (a branch, tag or commit), got {revision!r}")
        return KernelRequest(repo_id, "revision", revision.strip())
    if isinstance(version, bool) or not isinstance(version, (int, str)):
        raise KernelVersionError(f"version= must be an int (the major version) or a range string, got {version!r}")
    if isinstance(version, int):
        if version < 0:
            raise KernelVersionError(f"version= must be a major version >= 0, got {version}")
        return KernelRequest(repo_id, "version", version)
    text = version.strip()
    if text.isdigit():  # "2" means what 2 means
        return KernelRequest(repo_id, "version", int(text))
    if not is_range(text):
        raise KernelVersionError(
            f"version={version!r} is neither a major version nor a range such as '>=1.0,<2.0'; "
            "pass a tag or branch as revision="
        )
    return KernelRequest(repo_id, "range", text)


def _listed(names) -> str:
    names = list(names)
    if not names:
        return "none"
    shown = ", ".join(names[:_MAX_LISTED])
    return shown + (f" and {len(names) - _MAX_LISTED} more" if len(names) > _MAX_LISTED else "")


def _version_of_tag(tag: str):
    """The PEP 440 version a release tag `vX.Y.Z` stands for, or None for other tags."""
    from packaging.version import InvalidVersion, Version

    if not _TAG_RE.match(tag):
        return None
    try:
        return Version(tag[1:])
    except InvalidVersion:
        return None


def release_tags(refs: Refs) -> list[tuple[object, str]]:
    """(version, tag name) for every release tag, lowest first."""
    found = [(v, name) for name in refs.tags if (v := _version_of_tag(name)) is not None]
    return sorted(found, key=lambda pair: (pair[0], pair[1]))


def _version_branches(refs: Refs) -> list[str]:
    majors = sorted(int(b[1:]) for b in refs.branches if re.fullmatch(r"v\d+", b))
    return [f"v{m}" for m in majors]


def resolve(request: KernelRequest, refs: Refs) -> Resolved:
    """The commit `request` names in `refs`; KernelVersionError (listing what exists) when
    nothing matches. A full commit sha resolves to itself without looking at `refs`."""
    if request.kind == "version":
        branch = f"v{request.value}"
        sha = refs.branches.get(branch)
        if sha is None:
            raise KernelVersionError(
                f"{request.repo_id} has no branch {branch} (version={request.value}); "
                f"version branches: {_listed(_version_branches(refs))}; all branches: {_listed(sorted(refs.branches))}"
            )
        return Resolved(branch, sha)

    if request.kind == "range":
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        try:
            spec = SpecifierSet(str(request.value))
        except InvalidSpecifier:
            raise KernelVersionError(
                f"'{request.value}' is not a valid version range for {request.repo_id}; "
                "write PEP 440 specifiers such as '>=1.0,<2.0' or '~=2.1'"
            ) from None
        tags = release_tags(refs)
        matching = list(spec.filter([v for v, _ in tags]))
        if not matching:
            raise KernelVersionError(
                f"no release tag of {request.repo_id} matches '{request.value}'; "
                f"tags: {_listed([name for _, name in tags] or sorted(refs.tags))}"
            )
        best = max(matching)
        # Two tags may spell one version (v1.0 and v1.0.0): take the last name, deterministically.
        name = [n for v, n in tags if v == best][-1]
        return Resolved(name, refs.tags[name])

    rev = str(request.value)
    if COMMIT_RE.match(rev):
        return Resolved(rev, rev)
    for prefix, table in (("refs/tags/", refs.tags), ("refs/heads/", refs.branches)):
        if rev.startswith(prefix) and rev[len(prefix):] in table:
            return Resolved(rev[len(prefix):], table[rev[len(prefix):]])
    # git's own order for an ambiguous short name: a tag before a branch.
    if rev in refs.tags:
        return Resolved(rev, refs.tags[rev])
    if rev in refs.branches:
        return Resolved(rev, refs.branches[rev])
    raise KernelVersionError(
        f"{request.repo_id} has no tag or branch '{rev}'; tags: {_listed(sorted(refs.tags))}; "
        f"branches: {_listed(sorted(refs.branches))}"
    )
