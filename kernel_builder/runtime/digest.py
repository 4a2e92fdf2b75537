"""Digests of a variant folder, computed exactly as the `kernels` runtime computes them
(`kernels._rust.Digest.hash_variant`):

- every regular file under the folder, recursively, keyed by its POSIX path relative to
  the folder, valued by base64(sha256(bytes)) (standard alphabet, padded);
- except the top-level `metadata.json` (which holds the digest) and top-level
  `metadata.json.sigstore` (the Sigstore bundle signing metadata.json, added after the
  build: kernels 0.19.1 leaves it out), anything under a `__pycache__` directory at any
  depth, and files ending in `.pyc`;
- hidden files are included; a symlink to a file is hashed by its target's bytes, a
  symlinked directory is not descended into.

The builder writes `metadata["digest"] = {"algorithm": "sha256", "files": hash_variant(dir)}`.

Hashing never opens anything but a regular file (a FIFO or device would block or never end).
`verify_digest` compares names before it hashes anything, so an unknown (maybe huge) file is
refused without being read. It is stricter than the hash, because what it passes gets imported: every entry
must be a regular file or a folder (a symlinked folder is not hashed yet could shadow a
module; a link may point anywhere), except the links huggingface_hub's cache makes from a
snapshot's files into its own blobs/ folder.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from pathlib import Path

from kernel_builder.runtime.files import describe_mode, open_regular

ALGORITHMS = ("sha256", "sha512")  # what kernels' metadata.json accepts
_CHUNK = 1 << 20


def _file_digest(path: str, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with os.fdopen(open_regular(path), "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return base64.b64encode(h.digest()).decode("ascii")


def digest_bytes(data: bytes, algorithm: str) -> str:
    """The digest of bytes already read, in the form hash_variant gives for a file."""
    return base64.b64encode(hashlib.new(algorithm, data).digest()).decode("ascii")


# Top-level files that are not part of the digest (kernels 0.19.1's exclusions, exactly).
UNHASHED = ("metadata.json", "metadata.json.sigstore")


def _excluded(rel_parts: tuple[str, ...]) -> bool:
    if len(rel_parts) == 1 and rel_parts[0] in UNHASHED:
        return True
    return rel_parts[-1].endswith(".pyc")


def hash_variant(path: Path | str, algorithm: str = "sha256") -> dict[str, str]:
    """Map each file of the variant folder `path` to its base64 digest (see module doc)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unsupported digest algorithm {algorithm!r}; supported: {', '.join(ALGORITHMS)}")
    root = os.fspath(path)
    return {rel: _file_digest(os.path.join(root, rel), algorithm) for rel in variant_files(root)}


def variant_files(path: Path | str) -> list[str]:
    """The POSIX paths (relative to `path`) of the files hash_variant hashes, sorted,
    found without reading any file."""
    root = os.fspath(path)
    if not os.path.isdir(root):
        raise NotADirectoryError(f"{root} is not a folder")
    files: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False, onerror=_raise):
        # Prune bytecode caches and (as kernels does) symlinked directories.
        dirnames[:] = [
            d for d in dirnames if d != "__pycache__" and not os.path.islink(os.path.join(dirpath, d))
        ]
        rel_dir = os.path.relpath(dirpath, root)
        prefix = () if rel_dir == os.curdir else tuple(Path(rel_dir).parts)
        for name in filenames:
            parts = (*prefix, name)
            if not _excluded(parts):
                files.append("/".join(parts))
    return sorted(files)


def _raise(error: OSError) -> None:
    raise error


def _hub_blobs(root: str) -> str | None:
    """`<repo>/blobs` when `root` is a variant in a huggingface_hub snapshot
    (`<repo>/snapshots/<sha>/build/<variant>`), whose files are links into it."""
    build = os.path.dirname(os.path.realpath(root))
    snapshots = os.path.dirname(os.path.dirname(build))
    if os.path.basename(build) != "build" or os.path.basename(snapshots) != "snapshots":
        return None
    return os.path.join(os.path.dirname(snapshots), "blobs")


def untrusted_entries(path: Path | str) -> list[str]:
    """One line per entry of the variant folder that is not a regular file or a real folder
    (see the module doc), found without following any link or opening anything.
    `__pycache__` folders are skipped: the loader never reads them."""
    root = os.fspath(path)
    blobs = _hub_blobs(root)
    problems: list[str] = []
    pending = [(root, "")]
    while pending:
        folder, prefix = pending.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                rel = prefix + entry.name
                if entry.name == "__pycache__":
                    continue
                if entry.is_symlink():
                    if not _is_blob_link(entry.path, blobs):
                        target = os.readlink(entry.path)
                        problems.append(f"{rel}: a symlink (to {target}); a variant may hold only regular files and folders")
                elif entry.is_dir(follow_symlinks=False):
                    pending.append((entry.path, rel + "/"))
                elif not entry.is_file(follow_symlinks=False):
                    kind = describe_mode(entry.stat(follow_symlinks=False).st_mode)
                    problems.append(f"{rel}: {kind}; a variant may hold only regular files and folders")
    return sorted(problems)


def _is_blob_link(link: str, blobs: str | None) -> bool:
    """A link huggingface_hub made: to a regular file directly in its blobs/ folder."""
    if blobs is None:
        return False
    target = os.path.realpath(link)
    if os.path.dirname(target) != os.path.realpath(blobs):
        return False
    try:
        return stat.S_ISREG(os.stat(target).st_mode)
    except OSError:
        return False


def verify_digest(path: Path | str, metadata: dict) -> list[str]:
    """Check the folder against `metadata["digest"]`; return one human-readable line per
    violation (empty when the folder matches)."""
    digest = metadata.get("digest")
    if not isinstance(digest, dict):
        return ["metadata.json has no 'digest' table"]
    algorithm = digest.get("algorithm")
    if algorithm not in ALGORITHMS:
        return [f"unsupported digest algorithm {algorithm!r} (supported: {', '.join(ALGORITHMS)})"]
    expected = digest.get("files")
    if not isinstance(expected, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in expected.items()
    ):
        return ["metadata.json 'digest.files' is not a table of path -> digest strings"]
    try:
        untrusted = untrusted_entries(path)
        if untrusted:
            return untrusted  # hashing is moot, and would follow those entries
        names = set(variant_files(path))
    except OSError as e:
        return [f"cannot read the folder's files: {e}"]

    # Names first, and only files the digest lists are read: an unknown file, however large,
    # is refused without being opened.
    problems: list[str] = []
    for rel in sorted(expected.keys() - names):
        problems.append(f"{rel}: missing file (listed in the digest, absent from the folder)")
    for rel in sorted(names - expected.keys()):
        problems.append(f"{rel}: unknown file (in the folder, not listed in the digest)")
    root = os.fspath(path)
    for rel in sorted(expected.keys() & names):
        try:
            actual = _file_digest(os.path.join(root, rel), algorithm)
        except OSError as e:
            return [f"cannot read the folder's files: {e}"]
        if expected[rel] != actual:
            problems.append(f"{rel}: hash mismatch (expected {algorithm} {expected[rel]}, got {actual})")
    return problems
