"""CUTLASS's C++ headers for a unit's `depends = ["cutlass_X_Y"]`: the exact release kernel-builder
builds that name with, unpacked once into a content-addressed folder of kbuild's cache.

kernel-builder fetches CUTLASS from GitHub at configure time (its dep-cutlass.cmake) and puts
`include/` on the include path; its Nix build installs the headers-only package, which adds
`tools/util/include/` (the `cutlass/util/...` headers). kbuild takes the same two trees from
files on PyPI (kernel_builder/data/cutlass.toml: which file, its sha256, which folder in it) and
accepts them only if their content digest is the release tag's. The folder is

    <cache>/tools/cutlass/<version>-<digest>/include/
    <cache>/tools/cutlass/<version>-<digest>/tools/util/include/
    <cache>/tools/cutlass/<version>-<digest>/ready        written last: the folder is complete

so its path names the release and its content, and a build whose include path holds it has both
in its input hash. A release without a PyPI source (2.10.0, 4.5.2) is taken from a source folder
the user names in KBUILD_CUTLASS_CHECKOUTS (a clone of the release tag) whose trees have the
release's digests; without one it is refused before anything compiles, in one line that says so.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tarfile
import tomllib
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable, Iterator

from kernel_builder.errors import BuildError
from kernel_builder.file_lock import exclusive_lock
from kernel_builder.paths import cache_dir
from kernel_builder.settings import CUTLASS_CHECKOUTS, read_environment

PREFIX = "cutlass_"
READY = "ready"
INDEX = "https://pypi.org/simple"  # the index kbuild fetches from unless PIP_INDEX_URL names another
_JSON_API = "application/vnd.pypi.simple.v1+json"  # the index's JSON API (PEP 691)
_TIMEOUT = 120


@dataclass(frozen=True)
class Source:
    """One file on the package index and which of its folders become which tree."""

    package: str
    file: str
    sha256: str
    size: int
    folders: tuple[tuple[str, str], ...]  # (tree, folder inside the archive)


@dataclass(frozen=True)
class Release:
    name: str  # cutlass_4_0
    version: str  # 4.0.0
    trees: tuple[tuple[str, str], ...]  # (tree, content digest): ("include", ...), ("tools/util/include", ...)
    sources: tuple[Source, ...]

    @property
    def key(self) -> str:
        """The folder name: the version and the digest of every tree together."""
        return f"{self.version}-{hashlib.sha256(json.dumps(self.trees).encode()).hexdigest()[:16]}"

    def describe(self) -> str:
        return f"CUTLASS {self.version} (depends {self.name})"

    def download_size(self) -> int:
        return sum(s.size for s in {s.file: s for s in self.sources}.values())


@functools.cache
def releases() -> dict[str, Release]:
    """Every `cutlass_*` name kbuild knows, from kernel_builder/data/cutlass.toml."""
    text = resources.files("kernel_builder").joinpath("data/cutlass.toml").read_text()
    found = {}
    for name, record in tomllib.loads(text).items():
        sources = tuple(
            Source(s["package"], s["file"], s["sha256"], s["size"], tuple(s["folders"].items()))
            for s in record.get("sources", ())
        )
        found[name] = Release(name, record["version"], tuple(record["trees"].items()), sources)
    return found


def wanted(depends: Iterable[str]) -> tuple[Release, ...]:
    """The CUTLASS releases among `depends` (in order, once each). The manifest has already
    refused a name kernels does not know; one it knows but this table lacks is refused here."""
    names = list(dict.fromkeys(d for d in depends if d.startswith(PREFIX)))
    known = releases()
    missing = [n for n in names if n not in known]
    if missing:
        raise BuildError(f"depends {missing[0]}: kbuild has no record of that CUTLASS release; "
                         f"it knows {', '.join(sorted(known))}")
    return tuple(known[n] for n in names)


def unavailable(release: Release) -> str | None:
    """Why kbuild cannot provide `release`, or None."""
    if release.sources or _checkout(release) is not None:
        return None
    named = read_environment().cutlass_checkouts
    tried = f" (none of {', '.join(map(str, named))} holds it)" if named else ""
    return (f"{release.describe()}: no file on PyPI carries that release's headers; clone its tag "
            f"(git clone --depth 1 --branch v{release.version} https://github.com/NVIDIA/cutlass DIR) and set "
            f"{CUTLASS_CHECKOUTS}=DIR{tried}, or depend on one of "
            f"{', '.join(n for n, r in sorted(releases().items()) if r.sources)}")


def _checkout(release: Release) -> Path | None:
    """The first KBUILD_CUTLASS_CHECKOUTS folder whose trees are exactly the release's."""
    return _matching_folder(release.trees, read_environment().cutlass_checkouts)


@functools.lru_cache(maxsize=32)
def _matching_folder(trees: tuple[tuple[str, str], ...], folders: tuple[Path, ...]) -> Path | None:
    # Cached: hashing a checkout's ~25 MB of headers once per process is enough.
    for folder in folders:
        if all(tree_digest(folder / tree) == digest for tree, digest in trees):
            return folder
    return None


def include_dirs(release: Release, say: Callable[[str], None] = lambda line: None) -> tuple[str, ...]:
    """The release's include folders (include/, then tools/util/include/), unpacked first if
    they are not yet; `say` hears once what that downloads."""
    root = ensure(release, say)
    return tuple(str(root / tree) for tree, _ in release.trees)


def ensure(release: Release, say: Callable[[str], None] = lambda line: None) -> Path:
    """The release's folder (module docstring), made once, under a lock. A ready folder is
    used as it is: it was checked when made (a build container gets the host's, read-only)."""
    base = tools_root()
    folder = base / release.key
    if (folder / READY).is_file():
        _touch(folder / READY)
        return folder
    reason = unavailable(release)
    if reason:
        raise BuildError(reason)
    with exclusive_lock(base / f"{release.key}.lock"):
        if (folder / READY).is_file():
            return folder
        shutil.rmtree(folder, ignore_errors=True)  # an unpacking that was interrupted
        staging = base / f".{release.key}.{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        mb = release.download_size() / 1e6
        if release.sources:
            say(f"fetching {release.describe()} headers from PyPI (first time only): "
                f"{', '.join(dict.fromkeys(s.file for s in release.sources))}, {mb:.1f} MB")
        else:
            say(f"copying {release.describe()} headers from {_checkout(release)} (first time only)")
        try:
            _assemble(release, staging)
            (staging / READY).write_text(json.dumps({"version": release.version, "trees": dict(release.trees)}) + "\n")
            staging.rename(folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return folder


def _touch(marker: Path) -> None:
    """The marker's mtime says when a build last used the folder (`kbuild env prune --older-than`)."""
    try:
        os.utime(marker)
    except OSError:
        pass  # a read-only cache still serves the headers


def tools_root() -> Path:
    return cache_dir("tools", "cutlass")


def _assemble(release: Release, staging: Path) -> None:
    """Download each source, unpack its folders into `staging`, check every tree's digest; a
    release without sources is copied from the user's checkout (already checked)."""
    checkout = None if release.sources else _checkout(release)
    if checkout is not None:
        for tree, _ in release.trees:
            shutil.copytree(checkout / tree, staging / tree, symlinks=False)
    else:
        downloads = staging / "downloads"
        downloads.mkdir(parents=True)
        for source in release.sources:
            archive = downloads / source.file
            if not archive.exists():
                download(source, archive)
            for tree, folder in source.folders:
                unpack(archive, folder, staging / tree)
        shutil.rmtree(downloads)
    for tree, expected in release.trees:
        got = tree_digest(staging / tree)
        if got != expected:
            origin = str(checkout) if checkout is not None else ", ".join(s.file for s in release.sources)
            raise BuildError(f"{release.describe()}: the {tree}/ unpacked from {origin} is not that release's "
                             f"(digest {got[:12]}, expected {expected[:12]})")


def tree_digest(folder: Path) -> str:
    """sha256 over the sorted relative paths of every file under `folder` and each file's own
    sha256: the same for a folder, a release tag's tree or an archive's, whatever the file modes."""
    digest = hashlib.sha256()
    files = sorted((p.relative_to(folder).as_posix(), p) for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []
    for relative, path in files:
        digest.update(relative.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def index_url() -> str:
    return (os.environ.get("PIP_INDEX_URL") or INDEX).rstrip("/")


def download(source: Source, dest: Path) -> None:
    """`source.file` from the package index into `dest`, refused unless its sha256 is the pinned one."""
    index = index_url()
    where = f"{source.file} from {index}"
    try:
        url = _file_url(index, source)
        digest = hashlib.sha256()
        with urllib.request.urlopen(url, timeout=_TIMEOUT) as response, open(dest, "wb") as out:
            for chunk in iter(lambda: response.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise BuildError(f"could not download {where}: {getattr(e, 'reason', None) or e}") from None
    if digest.hexdigest() != source.sha256:
        dest.unlink(missing_ok=True)
        raise BuildError(f"{where}: sha256 {digest.hexdigest()[:12]} is not the pinned {source.sha256[:12]}")


def _file_url(index: str, source: Source) -> str:
    """The file's address, as the index's project page (JSON API) lists it."""
    page = f"{index}/{source.package}/"
    request = urllib.request.Request(page, headers={"Accept": _JSON_API})
    with urllib.request.urlopen(request, timeout=_TIMEOUT) as response:
        listing = json.loads(response.read())
    for entry in listing.get("files", ()):
        if entry.get("filename") == source.file:
            return urllib.parse.urljoin(page, entry["url"])
    raise ValueError(f"the index does not list {source.file} under {source.package}")


def unpack(archive: Path, folder: str, dest: Path) -> None:
    """The regular files under `folder` of a wheel (zip) or sdist (tar) into `dest`; a member
    that would land outside `dest` is refused."""
    prefix = folder.rstrip("/") + "/"
    count = 0
    for relative, data in _members(archive, prefix):
        parts = PurePosixPath(relative).parts
        if not parts or ".." in parts or PurePosixPath(relative).is_absolute():
            raise BuildError(f"{archive.name}: member {prefix}{relative} escapes its folder")
        target = dest.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data())
        count += 1
    if count == 0:
        raise BuildError(f"{archive.name} has no files under {prefix}")


def _members(archive: Path, prefix: str) -> Iterator[tuple[str, Callable[[], bytes]]]:
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                if info.filename.startswith(prefix) and not info.is_dir():
                    yield info.filename[len(prefix):], functools.partial(z.read, info)
        return
    with tarfile.open(archive) as t:
        for member in t:
            if member.name.startswith(prefix) and member.isfile():
                yield member.name[len(prefix):], functools.partial(_read_member, t, member)


def _read_member(t: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    stream = t.extractfile(member)
    assert stream is not None  # a regular file always has one
    return stream.read()
