"""The CUTLASS header folders kbuild has unpacked (kernel_builder.environments.cutlass_headers),
as `kbuild env list` shows them and `kbuild env prune` removes them: each is
`<cache>/tools/cutlass/<version>-<digest>/`, listed under the key `cutlass-<version>-<digest>`."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Sequence

from kernel_builder.environments.cutlass_headers import READY, tools_root
from kernel_builder.errors import KbuildError
from kernel_builder.file_lock import exclusive_lock

KEY_PREFIX = "cutlass-"


@dataclass(frozen=True)
class HeaderFolder:
    key: str  # cutlass-4.0.0-<digest>
    path: Path
    version: str | None
    complete: bool  # its `ready` marker was written: unpacking and the digest check finished
    size_bytes: int
    last_used: datetime | None

    def to_json(self) -> dict:
        return {
            "key": self.key, "kind": "cutlass-headers", "path": str(self.path), "version": self.version,
            "complete": self.complete, "size_bytes": self.size_bytes,
            "last_used": self.last_used.isoformat(timespec="seconds") if self.last_used else None,
        }


def list_header_folders() -> list[HeaderFolder]:
    """Every unpacked release, and the staging folders of interrupted unpackings (incomplete)."""
    from kernel_builder.environments.store import disk_usage

    found = []
    for path in sorted(p for p in tools_root().iterdir() if p.is_dir() and not p.is_symlink()):
        try:
            marker = json.loads((path / READY).read_text())
            last_used = datetime.fromtimestamp((path / READY).stat().st_mtime, timezone.utc)
        except (OSError, ValueError):
            marker, last_used = {}, None
        name = path.name.lstrip(".")
        found.append(HeaderFolder(KEY_PREFIX + name, path, marker.get("version"), bool(marker) and not path.name.startswith("."),
                                  disk_usage(path), last_used))
    return found


def prune_header_folders(*, all: bool = False, older_than_days: float | None = None,  # noqa: A002 - the flag's name
                         keys: Sequence[str] = ()) -> list[HeaderFolder]:
    """Remove incomplete folders always, plus `keys`, those unused for longer than
    `older_than_days`, or with `all` every one; one being unpacked right now is left alone."""
    root = tools_root()
    found = list_header_folders()
    unknown = [k for k in keys if k not in {f.key for f in found}]
    if unknown:
        raise KbuildError(f"no CUTLASS folder {', '.join(unknown)} in {root}; known: {', '.join(f.key for f in found) or 'none'}")
    cutoff = None if older_than_days is None else datetime.now(timezone.utc) - timedelta(days=older_than_days)
    removed = []
    for folder in found:
        stale = cutoff is not None and folder.last_used is not None and folder.last_used < cutoff
        if not (all or not folder.complete or folder.key in keys or stale):
            continue
        lock = root / f"{_release_key(folder.path)}.lock"
        with exclusive_lock(lock, blocking=False) as held:
            if not held:
                continue  # cutlass_headers.ensure is unpacking it
            shutil.rmtree(folder.path, ignore_errors=True)
        removed.append(folder)
    return removed


def _release_key(path: Path) -> str:
    """`4.0.0-<digest>` of a release folder, or of its staging folder `.4.0.0-<digest>.<pid>`:
    the name of the lock cutlass_headers.ensure holds while unpacking it."""
    return path.name[1:].rsplit(".", 1)[0] if path.name.startswith(".") else path.name
