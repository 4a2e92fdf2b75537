"""`kernels.lock`: pin each kernel a project declares to a commit, and each build variant
of that commit to a hash of its files.

A project declares its kernels in pyproject.toml, as the `kernels` package reads them:

    [tool.kernels.dependencies]
    "kernels-community/relu" = 1            # branch v1 (kbuild also takes "v1.2.0", ">=1.0,<2.0")

`kbuild lock PROJECT_DIR` writes PROJECT_DIR/kernels.lock (FORMATS.md):

    [{"repo_id": "kernels-community/relu", "sha": "<commit>",
      "variants": {"torch-cpu": {"hash": "sha256-<hex>", "hash_type": "git_lfs_concat"}}}]

The variant hash (`git_lfs_concat`, the one the `kernels` package defined for this format):
sha256 over the variant's files sorted by their UTF-8 path relative to the variant folder,
feeding for each file its path bytes and then the raw bytes of its Hub object id: the LFS
sha256 for LFS files, else the git blob sha1. Bytecode (`*.pyc`, `__pycache__/`) is left
out. Locally the same hash is computed from the bytes in the huggingface_hub cache, whose
blob file names say which kind of id a file has (64 hex digits: LFS, 40: git blob).

kernels 0.17 itself writes and reads another shape, `[{"dependency": {"repo-id", "version"},
"lock": {"commit"}}]`, which has no room for variant hashes and rejects unknown keys.
`--format kernels` writes that shape; both shapes are read here, and a lock without
variant hashes pins the commit only (the files are still checked against metadata.json).

Only the standard library is imported at module level: the runtime reads lock files too.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kernel_builder.runtime.loader import KernelLoadError, read_json
from kernel_builder.runtime.signatures import Rule, SignatureError
from kernel_builder.runtime.versions import COMMIT_RE

LOCKFILE = "kernels.lock"
HASH_TYPE = "git_lfs_concat"
FORMATS = ("kbuild", "kernels")  # FORMATS.md's shape; kernels 0.17's shape


class LockfileError(KernelLoadError):
    """kernels.lock or the project's [tool.kernels.dependencies] is missing or malformed (a
    KernelLoadError, so get_kernel's callers catch one family of errors)."""


class LockMismatchError(KernelLoadError):
    """The files of a downloaded variant do not hash to what kernels.lock pins."""


@dataclass(frozen=True)
class VariantLock:
    hash: str
    hash_type: str = HASH_TYPE


@dataclass(frozen=True)
class LockEntry:
    """One locked kernel. `variants` is None for a lock in kernels 0.17's shape (commit only).
    `requested` is what the project asked for (an int major version, or a tag/range string)."""

    repo_id: str
    sha: str
    variants: Mapping[str, VariantLock] | None
    requested: int | str | None = None
    # Signer rules (runtime/signatures.py) this kernel must be signed by; kept across `kbuild lock` runs.
    signers: tuple[str, ...] | None = None

    def to_json(self) -> dict:
        data = {
            "repo_id": self.repo_id,
            "sha": self.sha,
            "variants": {
                name: {"hash": v.hash, "hash_type": v.hash_type} for name, v in sorted((self.variants or {}).items())
            },
        }
        if self.signers:
            data["signers"] = list(self.signers)
        return data

    def to_kernels_json(self) -> dict:
        """kernels 0.17's entry: its dependency key takes an int version or a revision string."""
        dependency: dict = {"repo-id": self.repo_id}
        if isinstance(self.requested, int):
            dependency["version"] = self.requested
        else:
            dependency["revision"] = str(self.requested) if self.requested is not None else self.sha
        return {"dependency": dependency, "lock": {"commit": self.sha}}


# -- the variant hash ----------------------------------------------------------------------
def _excluded(rel: str) -> bool:
    return rel.endswith(".pyc") or "__pycache__" in rel.split("/")


def combine_variant_hash(files: Iterable[tuple[str, str]]) -> str:
    """`sha256-<hex>` over (relative POSIX path, hex object id) pairs, as described above."""
    h = hashlib.sha256()
    for path, oid in sorted((p.encode("utf-8"), o) for p, o in files if not _excluded(p)):
        h.update(path)
        h.update(bytes.fromhex(oid))
    return f"sha256-{h.hexdigest()}"


def _git_blob_sha1(path: str) -> str:
    h = hashlib.sha1()
    h.update(f"blob {os.path.getsize(path)}\0".encode())
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def local_variant_hash(folder: str | os.PathLike) -> str:
    """The `git_lfs_concat` hash of a variant folder in the huggingface_hub cache, from the
    bytes on disk (so a file changed in the cache changes the hash)."""
    root = os.fspath(folder)
    pairs: list[tuple[str, str]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            full = os.path.join(dirpath, name)
            rel = Path(os.path.relpath(full, root)).as_posix()
            if _excluded(rel):
                continue
            if not os.path.islink(full):
                # Only a cache link says whether the Hub stored the file in LFS or in git.
                raise LockMismatchError(
                    f"cannot check {rel} in {root} against kernels.lock: it is not a link into the "
                    "Hugging Face cache's blobs (was the cache modified, or are symlinks disabled?)"
                )
            blob = os.path.basename(os.path.realpath(full))
            if len(blob) == 64:
                pairs.append((rel, _sha256(full)))
            elif len(blob) == 40:
                pairs.append((rel, _git_blob_sha1(full)))
            else:
                raise LockMismatchError(f"cannot check {rel} in {root} against kernels.lock: unexpected cache blob name {blob!r}")
    return combine_variant_hash(pairs)


# -- reading -------------------------------------------------------------------------------
def _entry(item: object, where: str) -> LockEntry:
    if not isinstance(item, dict):
        raise LockfileError(f"{where} must be a JSON object")
    if "dependency" in item or "lock" in item:  # kernels 0.17's shape
        dep, lock = item.get("dependency"), item.get("lock")
        if not isinstance(dep, dict) or not isinstance(lock, dict):
            raise LockfileError(f"{where}: 'dependency' and 'lock' must be objects")
        repo_id, sha = dep.get("repo-id"), lock.get("commit")
        requested = dep.get("version", dep.get("revision"))
        variants = None
    else:
        repo_id, sha, raw = item.get("repo_id"), item.get("sha"), item.get("variants")
        requested = None
        if not isinstance(raw, dict):
            raise LockfileError(f"{where}: 'variants' must be an object of variant -> {{hash, hash_type}}")
        variants = {}
        for name, v in raw.items():
            if not isinstance(v, dict) or not isinstance(v.get("hash"), str):
                raise LockfileError(f"{where}: variant '{name}' must have a string 'hash'")
            variants[name] = VariantLock(v["hash"], v.get("hash_type", HASH_TYPE))
    if not isinstance(repo_id, str) or not repo_id:
        raise LockfileError(f"{where} lacks the kernel's repo id")
    if not isinstance(sha, str) or not COMMIT_RE.match(sha):
        raise LockfileError(f"{where} ({repo_id}): the commit must be 40 lowercase hex digits, got {sha!r}")
    return LockEntry(repo_id, sha, variants, requested, _signers(item.get("signers"), where))


def _signers(raw: object, where: str) -> tuple[str, ...] | None:
    """An entry's optional `signers`: a list of github:OWNER/REPO[/WORKFLOW]@REF rules."""
    if raw is None:
        return None
    if not isinstance(raw, list) or not raw or not all(isinstance(r, str) for r in raw):
        raise LockfileError(f"{where}: 'signers' must be a non-empty list of github:OWNER/REPO@REF rules")
    try:
        for rule in raw:
            Rule.parse(rule)
    except SignatureError as e:
        raise LockfileError(f"{where}: {e}") from None
    return tuple(raw)


def read_lockfile(path: str | os.PathLike) -> list[LockEntry]:
    """Every entry of a kernels.lock, in either shape (module doc)."""
    path = Path(path)
    data = read_json(path, LockfileError, "regenerate it with `kbuild lock`",
                     missing=f"{path} does not exist; create it with `kbuild lock {path.parent}`")
    if not isinstance(data, list):
        raise LockfileError(f"{path} must hold a JSON list of locked kernels")
    return [_entry(item, f"{path} entry {i + 1}") for i, item in enumerate(data)]


def lock_entry_for(path: str | os.PathLike, repo_id: str) -> LockEntry:
    """The entry for `repo_id` (compared case-insensitively, as the Hub does)."""
    repo_id = repo_id.strip()
    entries = read_lockfile(path)
    for entry in entries:
        if entry.repo_id.casefold() == repo_id.casefold():
            return entry
    locked = ", ".join(e.repo_id for e in entries) or "none"
    raise LockfileError(
        f"{repo_id} is not locked in {path} (locked: {locked}); add it to [tool.kernels.dependencies] and run `kbuild lock`"
    )


def verify_locked_variant(entry: LockEntry, variant: str, folder: Path, *, lockfile: Path | None = None) -> None:
    """Refuse (LockMismatchError) a downloaded variant whose files do not hash to the lock's value."""
    where = lockfile or LOCKFILE
    if entry.variants is None:
        return  # kernels 0.17's shape pins the commit only
    locked = entry.variants.get(variant)
    if locked is None:
        names = ", ".join(sorted(entry.variants)) or "none"
        raise LockMismatchError(
            f"refusing to load {entry.repo_id}: {where} has no hash for variant {variant}, the one this machine "
            f"needs (locked variants: {names}); run `kbuild lock` again"
        )
    if locked.hash_type != HASH_TYPE:
        raise LockMismatchError(f"{where}: {entry.repo_id} variant {variant} uses hash type '{locked.hash_type}'; only '{HASH_TYPE}' is supported")
    actual = local_variant_hash(folder)
    if actual != locked.hash:
        raise LockMismatchError(
            f"refusing to load {entry.repo_id}@{entry.sha[:7]}: variant {variant} hashes to {actual}, but {where} "
            f"locks {locked.hash}; the cached files ({folder}) differ from what was locked. Nothing was imported."
        )
