"""The compiler errors in a build log, as (file, line, column, message): what CI annotates.

gcc, clang and hipcc write `file:line:col: error: message`; nvcc's front end writes
`file(line): error: message` (with `--display_error_number`, `error #20-D:`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

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
