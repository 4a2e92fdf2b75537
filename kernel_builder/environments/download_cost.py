"""What a pip install will download, and how big, said before it starts.

pip's own dry run (`pip install --dry-run --report`) names every file an install takes;
their sizes come from where they lie: a local file's stat (pip's find-links folders and
file:// indexes), else the server's answer to an HTTP HEAD (Content-Length). A size that
cannot be learned stays unknown and is said to be unknown, never guessed.

Both answers are cached under kbuild's cache folder: a dry run for a day (an index gains
releases; the store's flavour check and the creation it precedes share one), the size of
a file URL for good (an index never changes a published file).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

from kernel_builder.environments.pip_run import pip_environment, pip_process
from kernel_builder.formatting import human_size
from kernel_builder.paths import cache_dir

DRY_RUN_TTL_S = 24 * 3600
_DRY_RUN_TIMEOUT_S = 180  # a CUDA torch with its ~30 dependencies resolves in about 30 s here
_HEAD_TIMEOUT_S = 15
_HEAD_WORKERS = 8


@dataclass(frozen=True)
class Download:
    """One file a pip install takes: its distribution, version, URL and size (None: unknown)."""

    name: str
    version: str
    url: str
    size: int | None = None
    requires_dist: tuple[str, ...] = ()

    @property
    def filename(self) -> str:
        return unquote(urlsplit(self.url).path.rsplit("/", 1)[-1])


@dataclass(frozen=True)
class DownloadCost:
    """Every file of one install, and how to say what they add up to."""

    downloads: tuple[Download, ...]

    @property
    def total(self) -> int:
        """The bytes of the files whose size is known."""
        return sum(d.size for d in self.downloads if d.size is not None)

    @property
    def unknown(self) -> int:
        return sum(d.size is None for d in self.downloads)

    def sizes(self) -> dict[str, int]:
        """File name -> bytes, for the progress of the install."""
        return {d.filename: d.size for d in self.downloads if d.size is not None}

    def size_text(self) -> str:
        """'about 3.0 GB', 'about 3.0 GB plus 2 files of unknown size', 'size unknown'."""
        if not self.downloads:
            return "nothing"
        if self.unknown == len(self.downloads):
            return "size unknown"
        text = f"about {human_size(self.total)}"
        if self.unknown:
            text += f" plus {self.unknown} file{'s' if self.unknown > 1 else ''} of unknown size"
        return text

    def describe(self, named: Sequence[str] = ()) -> str:
        """'about 3.0 GB to download (torch 2.14.1, 15 NVIDIA wheels and 13 others)': the
        `named` distributions with their versions, the rest counted."""
        if not self.downloads:
            return "nothing to download"
        wanted = {_canonical(n) for n in named}
        parts = [f"{d.name} {d.version}" for d in self.downloads if _canonical(d.name) in wanted]
        rest = [d for d in self.downloads if _canonical(d.name) not in wanted]
        nvidia = sum(_canonical(d.name).startswith("nvidia-") for d in rest)
        others = len(rest) - nvidia
        if nvidia:
            parts.append(f"{nvidia} NVIDIA wheel{'s' if nvidia > 1 else ''}")
        if others:
            parts.append(f"{others} {'other' if others == 1 else 'others'}" if parts else f"{others} files")
        listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f" and {parts[-1]}"
        size = self.size_text()
        return f"{size} to download ({listed})" if size != "size unknown" else f"{listed} to download, size unknown"

    def __add__(self, other: "DownloadCost") -> "DownloadCost":
        """Both installs' files, each once (two requests share dependencies)."""
        seen = {d.url for d in self.downloads}
        return DownloadCost(self.downloads + tuple(d for d in other.downloads if d.url not in seen))


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


# -- pip's dry run ---------------------------------------------------------------------------
def dry_run(
    python: str, requirements: Sequence[str], index_args: Sequence[str] = (), *, ignore_installed: bool = True,
    cached_only: bool = False, index_url: str | None = None,
) -> tuple[Download, ...] | None:
    """The files `python -m pip install REQUIREMENTS` would take (sizes not yet known), or
    None when pip cannot tell (offline, no such release, too slow) or, with `cached_only`,
    when no answer is cached. With `ignore_installed` the answer does not depend on what
    `python` has, so it is kept for a day; otherwise for this process only. `index_url`
    (which may carry a password) reaches pip through its environment, and the cached
    answer's key holds only its hash."""
    index = hashlib.sha256(index_url.encode()).hexdigest() if index_url else None
    key = json.dumps([python, list(requirements), list(index_args), ignore_installed, index])
    if ignore_installed:
        cached = _read_cached_run(key)
        if cached is not None or cached_only:
            return cached
    elif cached_only:
        return None
    found = _dry_run(key, index_url)
    if found is not None and ignore_installed:
        _write_cached_run(key, found)
    return found


@functools.lru_cache(maxsize=None)
def _dry_run(key: str, index_url: str | None) -> tuple[Download, ...] | None:
    python, requirements, index_args, ignore_installed, _ = json.loads(key)
    with tempfile.TemporaryDirectory(prefix="kbuild-pip-dry-run-") as folder:
        report = Path(folder) / "report.json"
        command = [python, "-m", "pip", "install", "--dry-run", "--quiet", "--disable-pip-version-check",
                   "--timeout", "15", "--retries", "0", "--report", str(report), *index_args, *requirements]
        if ignore_installed:
            command.insert(4, "--ignore-installed")
        try:
            with pip_process(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                             env=pip_environment(index_url)) as done:
                done.wait(timeout=_DRY_RUN_TIMEOUT_S)
            items = json.loads(report.read_text())["install"] if done.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, ValueError, KeyError):
            return None
    if items is None:
        return None
    try:
        return tuple(
            Download(i["metadata"]["name"], i["metadata"]["version"], i["download_info"]["url"],
                     requires_dist=tuple(i["metadata"].get("requires_dist") or ()))
            for i in items
        )
    except (KeyError, TypeError):
        return None


def _run_file(key: str) -> Path:
    return cache_dir("pip-dry-runs") / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"


def _read_cached_run(key: str) -> tuple[Download, ...] | None:
    path = _run_file(key)
    try:
        if time.time() - path.stat().st_mtime > DRY_RUN_TTL_S:
            return None
        data = json.loads(path.read_text())
        if data["key"] != key:
            return None
        return tuple(Download(d["name"], d["version"], d["url"], requires_dist=tuple(d["requires_dist"]))
                     for d in data["downloads"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cached_run(key: str, downloads: tuple[Download, ...]) -> None:
    rows = [{"name": d.name, "version": d.version, "url": d.url, "requires_dist": list(d.requires_dist)}
            for d in downloads]
    _write_json(_run_file(key), {"key": key, "downloads": rows})


# -- sizes -----------------------------------------------------------------------------------
def cost(downloads: Sequence[Download]) -> DownloadCost:
    """The downloads with their sizes (HEAD requests in parallel, remembered by URL)."""
    known = _read_sizes()
    remote = sorted({d.url for d in downloads if urlsplit(d.url).scheme in ("http", "https") and d.url not in known})
    if remote:
        with ThreadPoolExecutor(max_workers=min(_HEAD_WORKERS, len(remote))) as pool:
            learned = {url: size for url, size in zip(remote, pool.map(_remote_size, remote)) if size is not None}
        if learned:
            _write_sizes(learned)
            known.update(learned)
    return DownloadCost(tuple(
        Download(d.name, d.version, d.url, known.get(d.url, _local_size(d.url)), d.requires_dist) for d in downloads
    ))


def _local_size(url: str) -> int | None:
    """A file:// URL's or a plain path's size on disk (pip's local wheels), else None."""
    parts = urlsplit(url)
    if parts.scheme not in ("", "file"):
        return None
    try:
        return Path(url2pathname(parts.path)).stat().st_size
    except OSError:
        return None


def _remote_size(url: str) -> int | None:
    """Content-Length of an HTTP HEAD; None when the server does not say or cannot be asked."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=_HEAD_TIMEOUT_S) as answer:
            length = answer.headers.get("Content-Length")
    except (OSError, ValueError):
        return None
    return int(length) if length and length.isdigit() else None


def _sizes_file() -> Path:
    return cache_dir("pip-dry-runs") / "sizes.json"


def _read_sizes() -> dict[str, int]:
    try:
        data = json.loads(_sizes_file().read_text())
    except (OSError, ValueError):
        return {}
    return {url: size for url, size in data.items() if isinstance(size, int)} if isinstance(data, dict) else {}


def _write_sizes(learned: dict[str, int]) -> None:
    _write_json(_sizes_file(), {**_read_sizes(), **learned})


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data) + "\n")
        tmp.replace(path)  # atomic: two kbuilds writing at once leave one whole file
    except OSError:
        tmp.unlink(missing_ok=True)  # a read-only cache costs a second dry run, nothing more
