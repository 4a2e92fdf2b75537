"""Rewrite an edition-less or edition-5 build.toml to edition 6, line by line, so comments, key
order and formatting of everything unchanged stay as they were (no TOML writer needed).

Edition 6 renames one thing: a unit's `backend = "cuda"` becomes `language = "cpp-cuda"`; and
`[general]` gains `edition = 6`. The result must parse and describe the same units, or the
original is kept.
"""

from __future__ import annotations

import os
import re
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from kernel_builder.errors import KbuildError, ManifestError
from kernel_builder.kernel.manifest import load_manifest
from kernel_builder.variants import BACKENDS

_HEADER = re.compile(r"^\s*\[\s*([^\]]+?)\s*\]")
_EDITION = re.compile(r"^(\s*)edition(\s*=\s*)[^#\n]*?(\s*(#.*)?)$")
_NAME = re.compile(r"^\s*name\s*=")
# `backend = "cuda"` alone on a line, inside an inline table, or as a dotted key (`x.backend = ...`).
_BACKEND = re.compile(r"(?<![\w-])backend(\s*=\s*)([\"'])(" + "|".join(BACKENDS) + r")\2")


@dataclass(frozen=True)
class Migration:
    path: Path
    old_edition: int | None  # None: the file had no `edition`
    changed: bool  # False: already edition 6


def declared_edition(text: str) -> int | None:
    general = tomllib.loads(text).get("general", {})
    return general.get("edition") if isinstance(general, dict) else None


def migrate_text(text: str) -> str:
    """The edition-6 text of an edition-less or edition-5 build.toml."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    section = ""
    general_at = name_at = edition_done = None
    for line in lines:
        header = _HEADER.match(line)
        if header and not line.lstrip().startswith("[["):
            section = header.group(1).replace(" ", "")
            if section == "general":
                general_at = len(out)
        elif section == "general" and _EDITION.match(line):
            line = _EDITION.sub(lambda m: f"{m.group(1)}edition{m.group(2)}6{m.group(3)}", line)
            edition_done = True
        elif section == "general" and name_at is None and _NAME.match(line):
            name_at = len(out)
        elif section == "kernel" or section.startswith("kernel.") or (section == "" and line.lstrip().startswith("kernel")):
            line = _BACKEND.sub(lambda m: f"language{m.group(1)}{m.group(2)}cpp-{m.group(3)}{m.group(2)}", line)
        out.append(line)
    if not edition_done:
        at = name_at if name_at is not None else general_at
        if at is None:
            raise KbuildError("build.toml has no [general] section; cannot add `edition = 6`")
        if out[at] and not out[at].endswith("\n"):
            out[at] += "\n"
        out.insert(at + 1, "edition = 6\n")
    return "".join(out)


def migrate(kernel_dir: Path | str, check: bool = False) -> Migration:
    """Migrate `<kernel_dir>/build.toml` in place (atomically); with check, only report."""
    path = Path(kernel_dir)
    if path.is_dir() or not path.name.endswith(".toml"):
        path = path / "build.toml"
    before = load_manifest(path)  # a file that does not parse now is not migrated
    text = path.read_text(encoding="utf-8")
    edition = declared_edition(text)
    if edition == 6:
        return Migration(path, 6, changed=False)
    if check:
        return Migration(path, edition, changed=True)
    new_text = migrate_text(text)
    fd, tmp = tempfile.mkstemp(prefix=".build.", suffix=".kbuild-migrate.toml", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(new_text)
        try:
            after = load_manifest(tmp)
        except ManifestError as e:
            raise KbuildError(f"{path}: not migrated, the edition-6 result does not parse: {e.message}") from None
        if [(u.name, u.backend) for u in after.units] != [(u.name, u.backend) for u in before.units]:
            raise KbuildError(f"{path}: not migrated, the edition-6 result describes other kernel units")
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return Migration(path, edition, changed=True)
