"""Reading a kernel repo's TOML files (build.toml, kbuild.toml): a file that is not UTF-8,
not TOML, or nested deeper than any real one is a ManifestError in one line, never a
traceback (tomllib parses nested arrays and inline tables recursively)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from kernel_builder.errors import ManifestError

MAX_TOML_DEPTH = 32  # kernel-builder's files nest 4 levels ([kernel.x] depends = [...]) at most


def load_toml(path: Path, file: str) -> dict:
    """The table in `path`; `file` is how messages name it."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ManifestError(f"{file}: invalid TOML: {e}") from None
    except UnicodeDecodeError:
        raise ManifestError(f"{file}: invalid TOML: the file is not UTF-8 text") from None
    except RecursionError:
        raise ManifestError(_too_deep(file)) from None
    if _depth(data) > MAX_TOML_DEPTH:
        raise ManifestError(_too_deep(file))
    return data


def _too_deep(file: str) -> str:
    return f"{file}: its arrays or tables nest more than {MAX_TOML_DEPTH} levels deep; no kernel's file does, fix the file"


def _depth(value: object) -> int:
    """How deeply tables and arrays nest in a parsed value, without recursion."""
    deepest = 0
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if depth <= MAX_TOML_DEPTH:  # deeper is refused anyway: stop walking
            pending += [(child, depth + 1) for child in children]
    return deepest
