"""sha256 digests of a variant folder, computed exactly as the `kernels` runtime does:
every file but the top-level metadata.json and bytecode, keyed by relative POSIX path,
valued by the base64 of its sha256."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path


def _digest(path: Path) -> str:
    return base64.b64encode(hashlib.sha256(path.read_bytes()).digest()).decode()


def hash_variant(folder: Path | str) -> dict[str, str]:
    folder = Path(folder)
    files = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if not path.is_file() or rel.as_posix() == "metadata.json":
            continue
        if "__pycache__" in rel.parts or path.suffix == ".pyc":
            continue
        files[rel.as_posix()] = _digest(path)
    return files


def verify_digest(folder: Path | str, metadata: dict) -> list[str]:
    """Violations of metadata['digest'] by the folder's files; empty when it holds."""
    digest = metadata.get("digest")
    if not isinstance(digest, dict) or not isinstance(digest.get("files"), dict):
        return ["metadata.json has no digest"]
    if digest.get("algorithm") != "sha256":
        return [f"unsupported digest algorithm {digest.get('algorithm')!r} (expected sha256)"]
    expected, actual = digest["files"], hash_variant(folder)
    problems = [f"{p}: missing" for p in sorted(set(expected) - set(actual))]
    problems += [f"{p}: not in the digest" for p in sorted(set(actual) - set(expected))]
    problems += [f"{p}: hash mismatch" for p in sorted(set(expected) & set(actual)) if expected[p] != actual[p]]
    return problems
