"""How kbuild writes a size and a reason in one line, the same in every message and table."""

from __future__ import annotations

_UNITS = ("B", "KB", "MB", "GB", "TB")


def human_size(size: int | float | None) -> str:
    """Decimal units, as disks and the Hub count them: 1.0 GB is 10**9 bytes; '' when unknown."""
    if size is None:
        return ""
    for unit in _UNITS:
        if size < 1000 or unit == _UNITS[-1]:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return ""


def first_line(reason: BaseException | str) -> str:
    """The first non-blank line of an error (or of its `explanation`, as the Docker SDK's
    errors carry) or of a text: what a one-line message quotes."""
    if isinstance(reason, BaseException):
        text, fallback = str(getattr(reason, "explanation", None) or reason), type(reason).__name__
    else:
        text, fallback = reason, "no reason given"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else fallback
