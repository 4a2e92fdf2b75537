"""The compiler errors in a build log, as (file, line, column, message): what CI annotates.

gcc, clang and hipcc write `file:line:col: error: message`; nvcc's front end writes
`file(line): error: message` (with `--display_error_number`, `error #20-D:`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_GCC = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)? (?:fatal )?error: (?P<message>.+)$")
_NVCC = re.compile(
    r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?:catastrophic )?error(?: #[\w-]+)?: (?P<message>.+)$"
)


@dataclass(frozen=True)
class CompilerError:
    file: str
    line: int
    column: int | None
    message: str


def compiler_errors(log_text: str) -> list[CompilerError]:
    """Every distinct compiler error of a log, in order (nvcc repeats one per architecture)."""
    found: dict[tuple[str, int, str], CompilerError] = {}
    for raw in log_text.splitlines():
        match = _GCC.match(raw.strip()) or _NVCC.match(raw.strip())
        if match is None:
            continue
        col = match.groupdict().get("col")
        error = CompilerError(match["file"], int(match["line"]), int(col) if col else None, match["message"].strip())
        found.setdefault((error.file, error.line, error.message), error)
    return list(found.values())


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# What gcc and clang print under an error (`   12 |     x = 1;`, `      |     ^`), and nvcc
# (the source line indented, then the caret line).
_GCC_SOURCE = re.compile(r"^\s*\d*\s*\|")
_CARET = re.compile(r"^\s*[\^~]")


def first_error_excerpt(log_text: str, root: Path | None = None) -> list[str]:
    """The first compiler error as the compiler printed it: `file:line:col: error: message`
    (the file relative to `root` when under it), then the offending source line and the caret
    under it. [] when the log holds no compiler error (a CMake or link failure)."""
    lines = [_ANSI.sub("", line).rstrip() for line in log_text.splitlines()]
    for i, raw in enumerate(lines):
        match = _GCC.match(raw.strip()) or _NVCC.match(raw.strip())
        if match is None:
            continue
        file = Path(match["file"])
        if root is not None and file.is_absolute() and file.resolve().is_relative_to(root.resolve()):
            file = file.resolve().relative_to(root.resolve())
        col = match.groupdict().get("col")
        place = f"{file}:{match['line']}" + (f":{col}" if col else "")
        excerpt = [f"{place}: error: {match['message'].strip()}"]
        following = lines[i + 1:i + 3]
        if _NVCC.match(raw.strip()):  # nvcc: the source line, then the caret line
            if len(following) == 2 and _CARET.match(following[1]):
                excerpt += following
        else:
            excerpt += [line for line in following if _GCC_SOURCE.match(line)][:2]
        return excerpt
    return []
