"""Files kbuild ships: templates (inside the wheel, or beside the package in a checkout)."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def templates_dir(*parts: str) -> Path:
    """`templates/<parts>`: packaged as kernel_builder/templates in a wheel, top-level in a checkout."""
    for base in (_PACKAGE / "templates", _PACKAGE.parent / "templates"):
        if base.is_dir():
            return base.joinpath(*parts)
    raise FileNotFoundError("kbuild's templates folder is missing; reinstall kbuild")
