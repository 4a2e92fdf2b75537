"""Writing kernels.lock: the kernels a project declares ([tool.kernels.dependencies] of its
pyproject.toml), each resolved on the Hub and every variant of that commit hashed from the
tree listing. The format and its verification at load time are kernel_builder.runtime.lockfile."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from kernel_builder.runtime.hub import HubClient, hub_cache_dir
from kernel_builder.runtime.lockfile import (
    FORMATS,
    LOCKFILE,
    LockEntry,
    LockfileError,
    VariantLock,
    combine_variant_hash,
    read_lockfile,
)
from kernel_builder.runtime.loader import KernelLoadError
from kernel_builder.runtime.versions import KernelRequest, check_repo_id, is_range


# -- the project's declared kernels --------------------------------------------------------
def read_dependencies(project_dir: str | os.PathLike) -> dict[str, int | str]:
    """[tool.kernels.dependencies] of PROJECT_DIR/pyproject.toml: repo id -> int major
    version, or a string: a release range (">=1.0,<2.0") or a tag, branch or commit."""
    import tomllib

    pyproject = Path(project_dir) / "pyproject.toml"
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LockfileError(f"{pyproject} does not exist; `kbuild lock` reads the kernels a project declares there") from None
    except OSError as e:
        raise LockfileError(f"cannot read {pyproject}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise LockfileError(f"{pyproject} is not valid TOML: {e}") from None
    deps = data.get("tool", {}).get("kernels", {}).get("dependencies")
    if deps is None:
        raise LockfileError(
            f"{pyproject} declares no kernels; add e.g.\n[tool.kernels.dependencies]\n\"kernels-community/relu\" = 1"
            .replace("\n", " ")
        )
    if not isinstance(deps, dict):
        raise LockfileError(f"{pyproject}: [tool.kernels.dependencies] must be a table of \"org/name\" = version")
    out: dict[str, int | str] = {}
    for repo_id, version in deps.items():
        try:
            check_repo_id(repo_id)
        except KernelLoadError as e:
            raise LockfileError(f"{pyproject}: [tool.kernels.dependencies]: {e.message}") from None
        if isinstance(version, bool) or not isinstance(version, (int, str)) or (isinstance(version, str) and not version.strip()):
            raise LockfileError(
                f"{pyproject}: [tool.kernels.dependencies] \"{repo_id}\" must be a major version (e.g. 1) "
                f"or a tag or range string, got {version!r}"
            )
        out[repo_id] = version.strip() if isinstance(version, str) else version
    if not out:
        raise LockfileError(f"{pyproject}: [tool.kernels.dependencies] is empty; nothing to lock")
    return out


def _request(repo_id: str, version: int | str) -> KernelRequest:
    if isinstance(version, int) or version.isdigit():
        return KernelRequest(repo_id, "version", int(version))
    return KernelRequest(repo_id, "range" if is_range(version) else "revision", version)


# -- locking against the Hub ----------------------------------------------------------------
def lock_kernel(repo_id: str, version: int | str, *, endpoint: str | None = None, token: str | bool | None = None) -> LockEntry:
    """Resolve `repo_id` at `version` on the Hub and hash every variant of that commit from
    the tree listing (no file is downloaded)."""
    from huggingface_hub.hf_api import RepoFile


    hub = HubClient(endpoint, token, hub_cache_dir())
    repo_type, _, resolved = hub.resolve(_request(repo_id, version))
    try:
        entries = list(hub.api.list_repo_tree(repo_id, path_in_repo="build", recursive=True, revision=resolved.sha, repo_type=repo_type))
    except Exception as e:  # noqa: BLE001 - one line for every failure
        from huggingface_hub.errors import EntryNotFoundError

        if isinstance(e, EntryNotFoundError):
            entries = []
        else:
            raise hub.fail(repo_id, e, f"listing build/ at {resolved.sha[:7]}") from None

    files: dict[str, list[tuple[str, str]]] = {}
    for f in entries:
        if not isinstance(f, RepoFile):
            continue
        parts = f.path.split("/")
        if len(parts) < 3 or parts[0] != "build" or not parts[1].startswith("torch"):
            continue
        oid = f.lfs.sha256 if f.lfs is not None else f.blob_id
        files.setdefault(parts[1], []).append(("/".join(parts[2:]), oid))
    if not files:
        raise LockfileError(f"{repo_id}@{resolved.ref} ({resolved.sha[:7]}) has no build variants under build/ to lock")
    variants = {name: VariantLock(combine_variant_hash(pairs)) for name, pairs in sorted(files.items())}
    return LockEntry(repo_id, resolved.sha, variants, version)


def render_lockfile(entries: Iterable[LockEntry], fmt: str = "kbuild") -> str:
    if fmt not in FORMATS:
        raise LockfileError(f"unknown lock file format '{fmt}'; choose one of {', '.join(FORMATS)}")
    ordered = sorted(entries, key=lambda e: e.repo_id)
    items = [e.to_json() if fmt == "kbuild" else e.to_kernels_json() for e in ordered]
    return json.dumps(items, indent=2) + "\n"


def write_lockfile(path: str | os.PathLike, entries: Iterable[LockEntry], fmt: str = "kbuild") -> Path:
    """Write atomically, so a failed run leaves the previous lock file intact."""
    path = Path(path)
    text = render_lockfile(entries, fmt)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".kernels.lock-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def lock_project(
    project_dir: str | os.PathLike = ".",
    *,
    fmt: str = "kbuild",
    endpoint: str | None = None,
    token: str | bool | None = None,
) -> tuple[Path, list[LockEntry]]:
    """Lock every kernel in PROJECT_DIR's [tool.kernels.dependencies] and write
    PROJECT_DIR/kernels.lock; returns (its path, the entries). Locking runs no kernel code,
    so it needs no trust opt-in; loading does."""
    if fmt not in FORMATS:
        raise LockfileError(f"unknown lock file format '{fmt}'; choose one of {', '.join(FORMATS)}")
    project = Path(project_dir)
    deps = read_dependencies(project)
    entries = [lock_kernel(repo_id, version, endpoint=endpoint, token=token) for repo_id, version in deps.items()]
    entries = _keep_signers(project / LOCKFILE, entries)
    return write_lockfile(project / LOCKFILE, entries, fmt), entries


def _keep_signers(path: Path, entries: list[LockEntry]) -> list[LockEntry]:
    """Relocking keeps each kernel's `signers` (written by hand) from the lock file it replaces."""
    if not path.is_file():
        return entries
    old = {e.repo_id.casefold(): e.signers for e in read_lockfile(path)}
    return [dataclasses.replace(e, signers=old.get(e.repo_id.casefold())) for e in entries]
