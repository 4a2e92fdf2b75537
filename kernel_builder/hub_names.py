"""Which repo ids the Hub accepts, as one rule for `kbuild publish` (refuse before any call)
and the Hub test server (refuse what the Hub refuses, so a name never becomes a path outside
its root). The rule is the one huggingface_hub's validate_repo_id states: ORG/NAME, each part
1 to 96 ASCII letters, digits, '-', '_' or '.', starting and ending with a letter, digit or
'_'; no '--' or '..' anywhere; not ending in '.git'. Standard library only."""

from __future__ import annotations

import re

_PART = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?")
PART_RULE = "1 to 96 of letters, digits, '-', '_' and '.', starting and ending with a letter, digit or '_'"


def name_problem(part: object) -> str | None:
    """Why `part` cannot be one half of a repo id (an organization or a repo name), or None."""
    if not isinstance(part, str):
        return f"expected text, not {type(part).__name__}"
    if not _PART.fullmatch(part):
        return f"{part!r} is not {PART_RULE}"
    if "--" in part or ".." in part:
        return f"{part!r} contains '--' or '..'"
    return None


def repo_id_problem(repo_id: object) -> str | None:
    """Why `repo_id` is not an ORG/NAME the Hub accepts, or None when it is one."""
    if not isinstance(repo_id, str):
        return f"expected ORG/NAME text, not {type(repo_id).__name__}"
    parts = repo_id.split("/")
    if len(parts) != 2:
        return "expected ORG/NAME"
    for part in parts:
        problem = name_problem(part)
        if problem:
            return problem
    if repo_id.endswith(".git"):
        return "a repo name cannot end in '.git'"
    return None
