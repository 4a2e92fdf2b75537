"""Digests of a variant folder, computed exactly as the `kernels` runtime computes them
(`kernels._rust.Digest.hash_variant`):

- every regular file under the folder, recursively, keyed by its POSIX path relative to
  the folder, valued by base64(sha256(bytes)) (standard alphabet, padded);
- except the top-level `metadata.json` (which holds the digest), anything under a
  `__pycache__` directory at any depth, and files ending in `.pyc`;
- hidden files are included; a symlink to a file is hashed by its target's bytes, a
  symlinked directory is not descended into.

The builder writes `metadata["digest"] = {"algorithm": "sha256", "files": hash_variant(dir)}`.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

ALGORITHMS = ("sha256", "sha512")  # what kernels' metadata.json accepts
_CHUNK = 1 << 20


def _file_digest(path: str, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return base64.b64encode(h.digest()).decode("ascii")


def _excluded(rel_parts: tuple[str, ...]) -> bool:
    if rel_parts == ("metadata.json",):
        return True
    return rel_parts[-1].endswith(".pyc")


def hash_variant(path: Path | str, algorithm: str = "sha256") -> dict[str, str]:
    """Map each file of the variant folder `path` to its base64 digest (see module doc)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unsupported digest algorithm {algorithm!r}; supported: {', '.join(ALGORITHMS)}")
    root = os.fspath(path)
    if not os.path.isdir(root):
        raise NotADirectoryError(f"{root} is not a folder")
    files: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False, onerror=_raise):
        # Prune bytecode caches and (as kernels does) symlinked directories.
        dirnames[:] = [
            d for d in dirnames if d != "__pycache__" and not os.path.islink(os.path.join(dirpath, d))
        ]
        rel_dir = os.path.relpath(dirpath, root)
        prefix = () if rel_dir == os.curdir else tuple(Path(rel_dir).parts)
        for name in filenames:
            parts = (*prefix, name)
            if _excluded(parts):
                continue
            files["/".join(parts)] = _file_digest(os.path.join(dirpath, name), algorithm)
    return dict(sorted(files.items()))


def _raise(error: OSError) -> None:
    raise error


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
        actual = hash_variant(path, algorithm)
    except OSError as e:
        return [f"cannot read the folder's files: {e}"]

    problems: list[str] = []
    for rel in sorted(expected.keys() - actual.keys()):
        problems.append(f"{rel}: missing file (listed in the digest, absent from the folder)")
    for rel in sorted(actual.keys() - expected.keys()):
        problems.append(f"{rel}: unknown file (in the folder, not listed in the digest)")
    for rel in sorted(expected.keys() & actual.keys()):
        if expected[rel] != actual[rel]:
            problems.append(f"{rel}: hash mismatch (expected {algorithm} {expected[rel]}, got {actual[rel]})")
    return problems
