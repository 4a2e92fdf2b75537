"""Tiny real wheels and PEP 503 index pages, for tests that let a real pip resolve against
packages of their own (a file:// or loopback index, a find-links folder): no network."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def tiny_wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = (),
               modules: dict[str, str] | None = None) -> Path:
    """A py3-none-any wheel of `name` `version` in `folder`: METADATA (with `requires` as
    Requires-Dist), WHEEL, the `modules` ({path: text}) and a RECORD of them all, so pip
    can resolve it and install it."""
    stem = f"{name.replace('-', '_')}-{version}"
    info = f"{stem}.dist-info"
    files = dict(modules or {})
    files[f"{info}/METADATA"] = "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                                         *(f"Requires-Dist: {r}\n" for r in requires)])
    files[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},{len(text)}"
              for path, text in files.items()]
    files[f"{info}/RECORD"] = "\n".join(record + [f"{info}/RECORD,,"]) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return path


def write_index_page(project: Path) -> None:
    """`project`/index.html linking every wheel in that folder: the project's page of an index."""
    links = "".join(f'<a href="{w.name}">{w.name}</a>' for w in sorted(project.glob("*.whl")))
    (project / "index.html").write_text(f"<html><body>{links}</body></html>\n")
