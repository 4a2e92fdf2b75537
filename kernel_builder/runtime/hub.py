"""`get_kernel`: load a kernel from the Hugging Face Hub by version, tag, range or revision.

    get_kernel("kernels-community/relu", version=1)         # head of branch v1
    get_kernel("kernels-community/relu@v1.1.0")             # a tag
    get_kernel("kernels-community/relu@>=1.0,<2.0")         # the highest matching vX.Y.Z tag
    get_kernel("kernels-community/relu", revision="<sha>")  # a commit (or a branch/tag name)

Steps: check trust (runtime/trust.py) before any request; resolve the ref to a commit with
one `list_repo_refs` call (runtime/versions.py); list `build/` at that commit (once per
commit, remembered); pick this machine's variant with the runtime's own selection
(runtime/select.py); download only `build/<variant>/*` with `snapshot_download` into the
huggingface_hub cache; import it with `load_local(verify=True)`, so files changed in the
cache since the download are refused by name.

Offline (`HF_HUB_OFFLINE=1` or `local_files_only=True`) nothing is requested: the last ref
listing, the per-commit variant lists and which variant folders are complete are kept in
`<HF_HUB_CACHE>/kernels--<org>--<name>/kbuild.json`, because huggingface_hub keeps no
record of them for sha downloads. The resolved branch or tag is also written to the
cache's `refs/<name>` (huggingface_hub's own format), which `kernels` reads offline.

Only the standard library is imported until a request is needed: huggingface_hub is
imported lazily, and an offline or fully cached load by commit never imports it. A warm
load by version or tag (one ref listing) imports only its HTTP layer, not `hf_api`.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from kernel_builder.runtime.digest import untrusted_entries
from kernel_builder.runtime.files import JsonFileError, load_json_file, read_regular
from kernel_builder.runtime.loader import (
    DigestMismatchError,
    KernelLoadError,
    load_local,
)
from kernel_builder.runtime.select import select_variant
from kernel_builder.runtime.signatures import BUNDLE, SignaturePolicy
from kernel_builder.runtime.system import System, detect_system
from kernel_builder.runtime.trust import check_trust
from kernel_builder.runtime.versions import (
    COMMIT_RE,
    KernelRequest,
    KernelVersionError,
    Refs,
    Resolved,
    parse_request,
    resolve,
)

logger = logging.getLogger(__name__)

REPO_TYPES = ("kernel", "model")  # "model" for servers that do not know the kernel type
STATE_FILE = "kbuild.json"
_STATE_FORMAT = 1
_TRUE = {"1", "ON", "YES", "TRUE"}  # huggingface_hub's truthy env values
_SHORT_SHA_RE = re.compile(r"^[0-9a-f]{7,39}$")
_MAX_LISTED = 5
_MAX_REF_BYTES = 1024  # a refs/<name> file holds one commit id


class KernelNotFoundError(KernelLoadError):
    """The repo does not exist on the Hub (or is private and the token cannot see it)."""


class KernelOfflineError(KernelLoadError):
    """Offline, and the cache does not hold what was asked for."""


class HubRequestError(KernelLoadError):
    """The Hub could not be reached or answered with an error."""


@dataclass(frozen=True)
class FetchedKernel:
    """A variant folder in the local cache, ready for `load_local`."""

    repo_id: str
    repo_type: str  # "kernel", or "model" on a server without kernel repos
    ref: str  # what matched: "v1", "v1.1.0", or the sha itself
    sha: str
    variant: str
    path: Path  # <cache>/<repo folder>/snapshots/<sha>/build/<variant>
    downloaded: bool  # whether this call fetched any file


# -- environment ---------------------------------------------------------------------------
def hub_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The huggingface_hub cache, resolved from the environment exactly as huggingface_hub
    does (HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, HF_HOME, XDG_CACHE_HOME), without importing it."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()

    def expand(p: str) -> str:
        return os.path.expandvars(os.path.expanduser(p))

    home = expand(os.getenv("HF_HOME", os.path.join(os.getenv("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "huggingface")))
    legacy = os.getenv("HUGGINGFACE_HUB_CACHE", os.path.join(home, "hub"))
    return Path(expand(os.getenv("HF_HUB_CACHE", legacy)))


def offline_mode() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE), read now rather than at import."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    return value is not None and value.upper() in _TRUE


# -- what kbuild remembers in the cache ----------------------------------------------------
class _RepoCache:
    """One repo's folder in the huggingface_hub cache and kbuild's notes beside its snapshots."""

    def __init__(self, cache: Path, repo_id: str, repo_type: str):
        self.repo_id, self.repo_type = repo_id, repo_type
        self.folder = cache / "--".join([f"{repo_type}s", *repo_id.split("/")])
        self.state_file = self.folder / STATE_FILE

    def exists(self) -> bool:
        return self.folder.is_dir()

    def load(self) -> dict:
        try:
            data = load_json_file(self.state_file)
        except FileNotFoundError:
            return {}
        except (OSError, JsonFileError) as e:
            # Only a cache of what the Hub said: an unusable one costs a request, not the load.
            logger.warning("kbuild: ignoring %s: %s", self.state_file, e)
            return {}
        return data if isinstance(data, dict) and data.get("format") == _STATE_FORMAT else {}

    def save(self, *, refs: Refs | None = None, variants: tuple[str, list[str]] | None = None,
             complete: tuple[str, str] | None = None) -> None:
        """Merge into the state file; re-read just before writing so concurrent loaders of
        other commits keep their entries. A failed write only costs a request later."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            (self.folder / "snapshots").mkdir(exist_ok=True)  # keeps `hf cache scan` from calling it corrupt
            state = self.load() or {"format": _STATE_FORMAT}
            if refs is not None:
                state["refs"] = refs.to_json()
            if variants is not None:
                state.setdefault("variants", {})[variants[0]] = sorted(variants[1])
            if complete is not None:
                done = state.setdefault("complete", {}).setdefault(complete[0], [])
                if complete[1] not in done:
                    done.append(complete[1])
                    done.sort()
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".kbuild-", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(state, f, indent=1, sort_keys=True)
            os.replace(tmp, self.state_file)
        except OSError as e:
            logger.warning("kbuild: could not update %s: %s", self.state_file, e)

    def refs(self) -> Refs | None:
        data = self.load().get("refs")
        return Refs.from_json(data) if data is not None else None

    def hf_ref(self, name: str) -> str | None:
        """A commit huggingface_hub (or `kernels`) recorded under refs/<name>."""
        try:
            sha = read_regular(self.folder / "refs" / name, limit=_MAX_REF_BYTES).decode("utf-8").strip()
        except (OSError, ValueError):
            return None
        return sha if COMMIT_RE.match(sha) else None

    def write_hf_ref(self, name: str, sha: str) -> None:
        if "/" in name or name.startswith(".") or COMMIT_RE.match(name):
            return
        try:
            (self.folder / "refs").mkdir(parents=True, exist_ok=True)
            target = self.folder / "refs" / name
            if self.hf_ref(name) == sha:
                return
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".kbuild-", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(sha)
            os.replace(tmp, target)
        except OSError as e:
            logger.warning("kbuild: could not record refs/%s in %s: %s", name, self.folder, e)

    def variants(self, sha: str) -> list[str] | None:
        names = self.load().get("variants", {}).get(sha)
        return list(names) if isinstance(names, list) else None

    def cached_variants(self, sha: str) -> list[str]:
        """Variant folders present in the snapshot of `sha` (offline, the only choices)."""
        build = self.snapshot(sha) / "build"
        try:
            return sorted(p.name for p in build.iterdir() if p.is_dir())
        except OSError:
            return []

    def is_complete(self, sha: str, variant: str) -> bool:
        done = self.load().get("complete", {}).get(sha, [])
        return variant in done and (self.variant_dir(sha, variant) / "metadata.json").exists()

    def snapshot(self, sha: str) -> Path:
        return self.folder / "snapshots" / sha

    def variant_dir(self, sha: str, variant: str) -> Path:
        return self.snapshot(sha) / "build" / variant


def _offline_refs(cache: _RepoCache, request: KernelRequest) -> Refs:
    """The last online listing, plus any refs/<name> files huggingface_hub or kernels wrote."""
    remembered = cache.refs() or Refs()
    branches, tags = dict(remembered.branches), dict(remembered.tags)
    names = []
    if request.kind == "version":
        names.append(f"v{request.value}")
    elif request.kind == "revision":
        names.append(str(request.value))
    else:
        try:
            names += [p.name for p in (cache.folder / "refs").iterdir() if p.is_file() and p.name.startswith("v")]
        except OSError:
            pass
    for name in names:
        sha = cache.hf_ref(name)
        if sha is None:
            continue
        # A refs/ file does not say whether it names a branch or a tag: vN reads as a branch.
        (branches if re.fullmatch(r"v\d+", name) or request.kind == "revision" else tags).setdefault(name, sha)
    return Refs(branches=branches, tags=tags)


# -- talking to the Hub --------------------------------------------------------------------
class HubClient:
    """The few calls get_kernel makes, with huggingface_hub's errors turned into one line."""

    def __init__(self, endpoint: str | None, token: str | bool | None, cache: Path):
        self.endpoint, self.token, self.cache = endpoint, token, cache

    @functools.cached_property
    def api(self):
        """huggingface_hub's HfApi, for the calls a warm load does not make: importing
        huggingface_hub.hf_api costs about as much as the rest of a warm load."""
        from huggingface_hub import HfApi

        from kernel_builder import __version__

        return HfApi(endpoint=self.endpoint, token=self.token, library_name="kbuild", library_version=__version__)

    @property
    def where(self) -> str:
        if self.endpoint:
            return self.endpoint
        from huggingface_hub import constants

        return constants.ENDPOINT

    def _list_refs(self, repo_id: str, repo_type: str) -> Refs:
        """HfApi.list_repo_refs's one GET, through huggingface_hub's own session, headers
        (token, user agent) and error mapping, without importing huggingface_hub.hf_api."""
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        from kernel_builder import __version__

        response = get_session().get(
            f"{self.where}/api/{repo_type}s/{repo_id}/refs",
            headers=build_hf_headers(token=self.token, library_name="kbuild", library_version=__version__),
        )
        hf_raise_for_status(response)
        data = response.json()
        return Refs(
            branches={b["name"]: b["targetCommit"] for b in data["branches"]},
            tags={t["name"]: t["targetCommit"] for t in data["tags"]},
        )

    def fail(self, repo_id: str, error: Exception, doing: str) -> KernelLoadError:
        from huggingface_hub.errors import (
            HfHubHTTPError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )

        if isinstance(error, RepositoryNotFoundError):
            return KernelNotFoundError(
                f"kernel repo {repo_id} was not found on {self.where}; check the name, or set HF_TOKEN if it is private"
            )
        if isinstance(error, RevisionNotFoundError):
            return KernelVersionError(f"{repo_id}: {doing}: the revision does not exist on {self.where}")
        if isinstance(error, HfHubHTTPError) and error.response is not None:
            status = error.response.status_code
            if status in (401, 403):
                return HubRequestError(f"{self.where} refused access to {repo_id} (HTTP {status}) while {doing}; check HF_TOKEN")
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
            return HubRequestError(f"{self.where} answered HTTP {status} while {doing} for {repo_id}: {first_line}")
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return HubRequestError(
            f"cannot reach {self.where} while {doing} for {repo_id} ({detail}); set HF_HUB_OFFLINE=1 to load from the cache"
        )

    def refs(self, repo_id: str) -> tuple[str, Refs]:
        """(repo type, refs); tries the kernel type first, then model."""
        from huggingface_hub.errors import (
            BadRequestError,
            HfHubHTTPError,
            RepositoryNotFoundError,
        )

        first: Exception | None = None
        for repo_type in REPO_TYPES:
            try:
                refs = self._list_refs(repo_id, repo_type)
            except (RepositoryNotFoundError, BadRequestError) as e:
                first = first or e
                continue
            except HfHubHTTPError as e:
                if e.response is not None and e.response.status_code == 404:
                    first = first or e
                    continue
                raise self.fail(repo_id, e, "listing its branches and tags") from None
            except Exception as e:  # noqa: BLE001 - unreachable Hub and the like: one line
                raise self.fail(repo_id, e, "listing its branches and tags") from None
            return repo_type, refs
        assert first is not None
        if isinstance(first, RepositoryNotFoundError) or (
            isinstance(first, HfHubHTTPError) and first.response is not None and first.response.status_code == 404
        ):
            raise KernelNotFoundError(
                f"kernel repo {repo_id} was not found on {self.where}; check the name, or set HF_TOKEN if it is private"
            )
        raise self.fail(repo_id, first, "listing its branches and tags") from None

    def resolve(self, request: KernelRequest) -> tuple[str, Refs, Resolved]:
        """(repo type, refs, the commit `request` names); a short commit id is resolved
        with one more call."""
        repo_type, refs = self.refs(request.repo_id)
        rev = str(request.value)
        if request.kind == "revision" and _SHORT_SHA_RE.match(rev):
            try:
                return repo_type, refs, resolve(request, refs)
            except KernelVersionError:
                return repo_type, refs, Resolved(rev, self.commit_of(request.repo_id, repo_type, rev))
        return repo_type, refs, resolve(request, refs)

    def commit_of(self, repo_id: str, repo_type: str, revision: str) -> str:
        try:
            info = self.api.repo_info(repo_id, repo_type=repo_type, revision=revision)
        except Exception as e:  # noqa: BLE001 - every failure becomes one line
            raise self.fail(repo_id, e, f"resolving revision '{revision}'") from None
        return info.sha

    def variant_names(self, repo_id: str, repo_type: str, sha: str) -> list[str]:
        from huggingface_hub.errors import EntryNotFoundError
        from huggingface_hub.hf_api import RepoFolder

        try:
            entries = list(self.api.list_repo_tree(repo_id, path_in_repo="build", revision=sha, repo_type=repo_type))
        except EntryNotFoundError:
            return []
        except Exception as e:  # noqa: BLE001
            raise self.fail(repo_id, e, f"listing build/ at {sha[:7]}") from None
        return sorted(e.path.rsplit("/", 1)[-1] for e in entries if isinstance(e, RepoFolder))

    def download(self, repo_id: str, repo_type: str, sha: str, variant: str) -> None:
        self.download_matching(repo_id, repo_type, sha, [f"build/{variant}/*"], f"build/{variant}")

    def download_matching(self, repo_id: str, repo_type: str, sha: str, patterns: list[str], what: str) -> None:
        from huggingface_hub import snapshot_download

        from kernel_builder import __version__

        try:
            snapshot_download(
                repo_id,
                repo_type=repo_type,
                revision=sha,
                allow_patterns=patterns,
                cache_dir=self.cache,
                endpoint=self.endpoint,
                token=self.token,
                library_name="kbuild",
                library_version=__version__,
            )
        except Exception as e:  # noqa: BLE001
            raise self.fail(repo_id, e, f"downloading {what} at {sha[:7]}") from None


# -- the public API ------------------------------------------------------------------------
def _no_variant_message(label: str, names: list[str], system: System, trace) -> str:
    """The loader's wording for 'no variant fits', for a repo on the Hub."""
    if not trace:
        found = f" (its build/ holds {', '.join(names)})" if names else ""
        return f"{label} has no build variants{found}; expected folders under build/ named like {system.variant_name or 'torch-cpu'}."
    reasons = "; ".join(f"{d.name} was rejected: {d.reason}" for d in trace)
    return (
        f"No build variant of {label} can load on this machine ({system.describe()}). "
        f"Variants found: {reasons}. Ask the publisher for a variant for this machine, "
        "or pass backend='cpu' if the kernel has a CPU build."
    )


def _resolve_offline(cache_dir: Path, request: KernelRequest) -> tuple[_RepoCache, Resolved]:
    caches = [_RepoCache(cache_dir, request.repo_id, t) for t in REPO_TYPES]
    present = [c for c in caches if c.exists()] or caches[:1]
    last: KernelVersionError | None = None
    for cache in present:
        if request.kind == "revision" and COMMIT_RE.match(str(request.value)):
            return cache, Resolved(str(request.value), str(request.value))
        try:
            return cache, resolve(request, _offline_refs(cache, request))
        except KernelVersionError as e:
            last = e
    raise KernelOfflineError(
        f"{request.describe()} cannot be resolved offline: the cache ({cache_dir}) holds no record of it "
        f"({last.message if last else 'nothing cached'}). Load it once online, or unset HF_HUB_OFFLINE."
    )


def fetch_kernel(
    repo_id: str,
    version: int | str | None = None,
    *,
    revision: str | None = None,
    backend: str | None = None,
    trust_remote_code: bool | Iterable[str] = False,
    local_files_only: bool = False,
    cache_dir: str | os.PathLike | None = None,
    token: str | bool | None = None,
    endpoint: str | None = None,
) -> FetchedKernel:
    """Resolve, select and download this machine's variant folder without importing it.

    Arguments as for `get_kernel`. Raises KernelLoadError subclasses with one-line messages:
    UntrustedKernelError, KernelNotFoundError, KernelVersionError (lists the tags or
    branches that exist), KernelOfflineError, HubRequestError, or KernelLoadError when no
    variant fits this machine.
    """
    request = parse_request(repo_id, version, revision)
    check_trust(request.repo_id, trust_remote_code)  # before any request or download
    cache_root = hub_cache_dir(cache_dir)
    offline = local_files_only or offline_mode()
    system = detect_system(backend)

    hub: HubClient | None = None
    if not offline and request.kind == "revision" and COMMIT_RE.match(str(request.value)):
        # A commit never changes: when its variant is already complete in the cache there is
        # nothing to ask the Hub (locked loads take this path).
        cached = _complete_commit(cache_root, request, system)
        if cached is not None:
            return cached
    if offline:
        cache, resolved = _resolve_offline(cache_root, request)
    else:
        hub = HubClient(endpoint, token, cache_root)
        cache, resolved = _resolve_online(hub, cache_root, request)

    sha = resolved.sha
    names = cache.variants(sha)
    if names is None:
        if hub is not None:
            names = hub.variant_names(request.repo_id, cache.repo_type, sha)
            cache.save(variants=(sha, names))
        else:
            names = cache.cached_variants(sha)  # offline: only what was downloaded can be chosen
    label = f"{request.repo_id}@{resolved.ref}" + ("" if resolved.ref == sha else f" ({sha[:7]})")
    if hub is None and not names:
        raise KernelOfflineError(
            f"{label} is not in the cache ({cache.folder}) and Hugging Face Hub is offline (HF_HUB_OFFLINE); "
            "load it once online first"
        )
    best, trace = select_variant(names, system)
    if best is None:
        raise KernelLoadError(_no_variant_message(label, names, system, trace))

    folder = cache.variant_dir(sha, best.name)
    downloaded = False
    if not cache.is_complete(sha, best.name):
        if hub is None:
            if not (folder / "metadata.json").is_file():
                raise KernelOfflineError(
                    f"{label}: variant {best.name} is not in the cache ({cache.folder}) and Hugging Face Hub "
                    "is offline (HF_HUB_OFFLINE); load it once online first"
                )
            # Downloaded by someone else (e.g. `kernels`): the digest check at load decides.
        else:
            hub.download(request.repo_id, cache.repo_type, sha, best.name)
            cache.save(complete=(sha, best.name))
            downloaded = True
    if resolved.ref != sha:
        cache.write_hf_ref(resolved.ref, sha)
    return FetchedKernel(request.repo_id, cache.repo_type, resolved.ref, sha, best.name, folder, downloaded)


def fetch_signed_metadata(
    repo_id: str,
    version: int | str | None = None,
    *,
    revision: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    token: str | bool | None = None,
    endpoint: str | None = None,
) -> tuple[str, list[tuple[str, Path]]]:
    """Every variant's metadata.json and signature bundle at a version, downloaded into the
    cache (nothing else: no code, so no trust needed): `kbuild verify REPO@VERSION`. Returns
    the resolved label and (variant, folder) for each variant of build/."""
    request = parse_request(repo_id, version, revision)
    cache_root = hub_cache_dir(cache_dir)
    hub = HubClient(endpoint, token, cache_root)
    cache, resolved = _resolve_online(hub, cache_root, request)
    sha = resolved.sha
    names = hub.variant_names(request.repo_id, cache.repo_type, sha)
    hub.download_matching(request.repo_id, cache.repo_type, sha,
                          ["build/*/metadata.json", f"build/*/{BUNDLE}"], "the variants' metadata")
    label = f"{request.repo_id}@{resolved.ref}" + ("" if resolved.ref == sha else f" ({sha[:7]})")
    return label, [(name, cache.variant_dir(sha, name)) for name in names]


def _complete_commit(cache_root: Path, request: KernelRequest, system: System) -> FetchedKernel | None:
    sha = str(request.value)
    for repo_type in REPO_TYPES:
        cache = _RepoCache(cache_root, request.repo_id, repo_type)
        names = cache.variants(sha)
        if names is None:
            continue
        best, _ = select_variant(names, system)
        if best is not None and cache.is_complete(sha, best.name):
            return FetchedKernel(request.repo_id, repo_type, sha, sha, best.name, cache.variant_dir(sha, best.name), False)
    return None


def _resolve_online(hub: HubClient, cache_root: Path, request: KernelRequest) -> tuple[_RepoCache, Resolved]:
    try:
        repo_type, refs, resolved = hub.resolve(request)
    except HubRequestError as e:
        # The Hub is unreachable or failing: fall back to what the cache remembers, as
        # huggingface_hub does for downloads.
        try:
            cache, resolved = _resolve_offline(cache_root, request)
        except KernelOfflineError:
            raise e from None
        logger.warning("kbuild: %s; using the cached %s", e.message, request.describe())
        return cache, resolved
    cache = _RepoCache(cache_root, request.repo_id, repo_type)
    cache.save(refs=refs)
    return cache, resolved


def get_kernel(
    repo_id: str,
    version: int | str | None = None,
    *,
    revision: str | None = None,
    backend: str | None = None,
    trust_remote_code: bool | Iterable[str] = False,
    lockfile: str | os.PathLike | None = None,
    local_files_only: bool = False,
    cache_dir: str | os.PathLike | None = None,
    token: str | bool | None = None,
    endpoint: str | None = None,
    signatures: SignaturePolicy | None = None,
) -> ModuleType:
    """Load a kernel from the Hub and return its module.

    Which version (exactly one way):
    - `version=N`: the head of branch `vN`; `version=">=1.0,<2.0"`: as a range below;
    - `"org/name@v2.1.0"` or `revision=...`: a tag, branch or commit;
    - `"org/name@>=2.0,<3.0"`: the highest `vX.Y.Z` tag the PEP 440 range admits;
    - `lockfile=path/to/kernels.lock`: the commit the lock pins, and the downloaded variant
      must match the lock's hash for it (kernel_builder.runtime.lockfile).

    `backend` overrides the detected backend ("cpu" or torch's own). `trust_remote_code`:
    True for any repo, or a list of repo ids / namespaces; otherwise only the allowlist
    (runtime/trust.py: kernels-community, KBUILD_TRUSTED_NAMESPACES, the kbuild config).
    `local_files_only` (or HF_HUB_OFFLINE=1) makes no request. `cache_dir`, `token` and
    `endpoint` go to huggingface_hub (defaults: its cache, HF_TOKEN, HF_ENDPOINT).

    The variant's files are checked against its metadata.json digests before import: a
    file changed in the cache is refused with its name, and nothing is imported. Before that,
    its Sigstore signature is checked by `signatures` (default: the lock entry's `signers`,
    else KBUILD_SIGNERS, else kernels' trusted signers; mode KBUILD_SIGNATURES, default warn).
    """
    lock_entry = None
    if lockfile is not None:
        from kernel_builder.runtime.lockfile import lock_entry_for

        if version is not None or revision is not None or "@" in str(repo_id):
            raise KernelVersionError(
                f"{repo_id}: pass either lockfile= or a version/revision, not both (the lock file pins the commit)"
            )
        lock_entry = lock_entry_for(lockfile, str(repo_id))
        revision = lock_entry.sha

    fetched = fetch_kernel(
        repo_id, version, revision=revision, backend=backend, trust_remote_code=trust_remote_code,
        local_files_only=local_files_only, cache_dir=cache_dir, token=token, endpoint=endpoint,
    )
    try:
        if lock_entry is not None:
            from kernel_builder.runtime.lockfile import verify_locked_variant

            untrusted = untrusted_entries(fetched.path)  # the lock's hash would open them
            if untrusted:
                raise DigestMismatchError(untrusted[0], path=fetched.path, violations=untrusted)
            verify_locked_variant(lock_entry, fetched.variant, fetched.path, lockfile=Path(lockfile))
        if signatures is None:  # the lock's signers, else KBUILD_SIGNERS, else kernels' list
            signatures = SignaturePolicy.of(lock_entry.signers if lock_entry is not None else None)
        return load_local(fetched.path, backend=backend, verify=True, signatures=signatures)
    except DigestMismatchError as e:
        listed = "; ".join(e.violations[:_MAX_LISTED])
        more = f" and {len(e.violations) - _MAX_LISTED} more" if len(e.violations) > _MAX_LISTED else ""
        raise DigestMismatchError(
            f"refusing to load {fetched.repo_id}@{fetched.ref}: files in the cached variant {fetched.path} do not match "
            f"the digests in its metadata.json: {listed}{more}. The cache was modified after download; delete "
            f"{fetched.path.parents[3]} (or run `hf cache delete`) to download it again. Nothing was imported.",
            path=e.path,
            violations=e.violations,
        ) from None
