"""The output cache: built variant folders kept in a store under their build's input id
(kernel_builder.runners.local.job_input_hash), so that a second runner, a re-run or a commit
that changes nothing the build reads installs the variant instead of compiling it.

A store is any folder fsspec reaches: a local path or file:// URL (fsspec comes with
huggingface_hub), s3:// (s3fs: the `cache-s3` extra), gs:// (gcsfs: `cache-gcs`), hf://
(huggingface_hub's HfFileSystem), http(s):// (read-only; aiohttp: `cache-http`).
One entry is one file, `<input id>.tar`: the variant's files (those its digest lists) and
its metadata.json.

A hit is never trusted blindly. The entry is unpacked into a staging folder beside the
variant, and installed (one rename, assemble.stamp.install) only when its metadata.json names
the same input id and variant and every digest verifies (runtime.digest.verify_digest). A
missing entry is a plain miss; an unreadable, truncated, tampered or mislabelled one is a miss
with a warning, and the job builds as if there were no cache.

An upload never shows a reader a half-written entry: to a local folder the entry is written
under a temporary name and renamed; to an object store (S3, GCS, the Hub) one put makes the
object appear whole or not at all."""

from __future__ import annotations

import os
import re
import shutil
import tarfile
import tempfile
import uuid
import zlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable

from kernel_builder.assemble.stamp import install
from kernel_builder.errors import KbuildError, UsageError
from kernel_builder.runtime.digest import UNHASHED, verify_digest, variant_files
from kernel_builder.runtime.files import JsonFileError, load_json_file
from kernel_builder.runtime.loader import STAGING_PREFIX
from kernel_builder.settings import OUTPUT_CACHE_MODES, READ, READWRITE, read_environment

_ID = re.compile(r"[0-9a-f]{64}")
_ENTRY_SUFFIX = ".tar"
_INCOMING = ".incoming"  # a local store's folder of entries being written
_LOCAL = ("file", "local")
_READ_ONLY = ("http", "https")
# The package each store's fsspec backend comes in, and kbuild's extra that installs it.
_EXTRAS = {"s3": ("s3fs", "cache-s3"), "s3a": ("s3fs", "cache-s3"), "gs": ("gcsfs", "cache-gcs"),
           "gcs": ("gcsfs", "cache-gcs"), "http": ("aiohttp", "cache-http"), "https": ("aiohttp", "cache-http")}


class OutputCacheError(KbuildError):
    """A store that cannot be read or written (the build goes on; the runner warns)."""


@dataclass(frozen=True)
class OutputCache:
    """A store of built variants, and whether this build may add to it (`mode`: readwrite,
    or read for builds of untrusted code, such as pull requests from forks)."""

    url: str
    mode: str = READWRITE

    def __post_init__(self) -> None:
        if self.mode not in OUTPUT_CACHE_MODES:
            raise UsageError(f"--output-cache-mode must be one of {', '.join(OUTPUT_CACHE_MODES)}, got {self.mode!r}")
        _filesystem_class(self.protocol, self.url)  # a backend that is not installed fails before any work

    @property
    def protocol(self) -> str:
        return self.url.split("://", 1)[0].lower() if "://" in self.url else "file"

    @property
    def writable(self) -> bool:
        return self.mode == READWRITE and self.protocol not in _READ_ONLY

    def describe(self) -> str:
        """One line for `kbuild doctor` and the docs: where, and whether builds add to it."""
        if self.protocol in _READ_ONLY:
            how = "read-only (HTTP stores are read-only)"
        else:
            how = "read and write" if self.writable else "read-only (--output-cache-mode read)"
        return f"{self.url} ({how})"

    @cached_property
    def _store(self):
        """(fsspec filesystem, root path in it), made on first use."""
        from fsspec.core import url_to_fs

        url = self.url if "://" in self.url else str(Path(self.url).expanduser().resolve())
        try:
            return url_to_fs(url)
        except (ImportError, ValueError, OSError) as e:
            raise OutputCacheError(f"cannot open the output cache {self.url}: {e}") from None

    def entry(self, input_id: str) -> str:
        """Where the entry of `input_id` lives in the store."""
        if not _ID.fullmatch(input_id):
            raise ValueError(f"not an input id: {input_id!r}")
        fs, root = self._store
        return f"{root.rstrip('/')}/{input_id}{_ENTRY_SUFFIX}"

    def entry_count(self) -> int:
        """How many entries the store holds (0 for a folder not made yet); an
        OutputCacheError when it cannot be listed."""
        fs, root = self._store
        try:
            if not fs.exists(root):
                return 0
            return sum(1 for name in fs.ls(root, detail=False) if name.endswith(_ENTRY_SUFFIX))
        except Exception as e:  # whatever the backend raises
            raise OutputCacheError(f"cannot list the output cache {self.url}: {_one_line(e)}") from None

    def fetch(self, input_id: str, dest: Path, warn: Callable[[str], None]) -> bool:
        """Install the variant of `input_id` at `dest` from the store: True on a verified hit;
        False on a miss, after `warn` heard why where the entry was there but unusable."""
        try:
            fs, _ = self._store
            path = self.entry(input_id)
        except OutputCacheError as e:
            warn(f"{e.message}; building")
            return False
        staging = dest.parent / f"{STAGING_PREFIX}cache-{dest.name}-{os.getpid()}"
        with tempfile.TemporaryDirectory(prefix="kbuild-output-cache-") as scratch:
            archive = Path(scratch) / "entry.tar"
            try:
                fs.get_file(path, str(archive))
            except FileNotFoundError:
                return False
            except Exception as e:  # a network or permission error of any fsspec backend: build instead
                warn(f"cannot download {self.url} entry {input_id}: {_one_line(e)}; building")
                return False
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(staging, ignore_errors=True)
            problems = unpack_entry(archive, staging)
        problems = problems or verify_entry(staging, input_id, dest.name)
        if problems:
            shutil.rmtree(staging, ignore_errors=True)
            warn(f"output cache entry {input_id} refused ({'; '.join(problems[:3])}); building")
            return False
        install(staging, dest)
        return True

    def store(self, input_id: str, variant: Path) -> bool:
        """Upload the variant folder as the entry of `input_id` (False: the store is
        read-only, or already holds it). An OutputCacheError says why an upload failed."""
        if not self.writable:
            return False
        fs, root = self._store
        path = self.entry(input_id)
        try:
            if fs.exists(path):
                return False  # the same inputs: an equivalent build is already there
            with tempfile.TemporaryDirectory(prefix="kbuild-output-cache-") as scratch:
                archive = pack_entry(variant, Path(scratch) / "entry.tar")
                if _is_local(fs):
                    incoming = f"{root.rstrip('/')}/{_INCOMING}"
                    fs.makedirs(incoming, exist_ok=True)
                    partial = f"{incoming}/{input_id}-{uuid.uuid4().hex}{_ENTRY_SUFFIX}"
                    try:
                        fs.put_file(str(archive), partial)
                        os.replace(partial, path)  # one rename: the entry appears whole
                    finally:
                        if fs.exists(partial):
                            fs.rm_file(partial)
                else:
                    fs.makedirs(root, exist_ok=True)
                    fs.put_file(str(archive), path)
        except OutputCacheError:
            raise
        except Exception as e:  # whatever the backend raises: the build stands, the upload is lost
            raise OutputCacheError(f"cannot upload to the output cache {self.url}: {_one_line(e)}") from None
        return True


def output_cache_for(url: str | None = None, mode: str | None = None) -> OutputCache | None:
    """The output cache a build uses: `url`/`mode` (--output-cache, --output-cache-mode),
    else KBUILD_OUTPUT_CACHE / KBUILD_OUTPUT_CACHE_MODE; None when neither names a store."""
    environment = read_environment()
    url = url or environment.output_cache
    if not url:
        return None
    return OutputCache(url, mode or environment.output_cache_mode or READWRITE)


def _filesystem_class(protocol: str, url: str) -> None:
    import fsspec

    try:
        fsspec.get_filesystem_class(protocol)
    except ValueError:
        raise UsageError(f"--output-cache {url}: fsspec knows no store '{protocol}://'") from None
    except ImportError:
        package, extra = _EXTRAS.get(protocol, (protocol, None))
        hint = f"pip install 'kbuild[{extra}]'" if extra else f"install the fsspec backend for {protocol}://"
        raise UsageError(f"--output-cache {url} needs {package}: {hint}") from None


def pack_entry(variant: Path, archive: Path) -> Path:
    """The entry of a variant folder: exactly the files its digest covers plus metadata.json
    (no __pycache__, nothing the build did not make), with neutral owners and times so that
    equal builds pack to equal bytes."""
    names = variant_files(variant) + [n for n in UNHASHED if (variant / n).is_file()]
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(names):
            info = tar.gettarinfo(str(variant / name), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            with open(variant / name, "rb") as f:
                tar.addfile(info, f)
    return archive


def unpack_entry(archive: Path, staging: Path) -> list[str]:
    """Unpack an entry into a new `staging` folder; what is wrong with it (empty: unpacked).
    Only regular files and folders are taken; a link, a device or a path out of the folder
    refuses the entry (tarfile's data filter, Python >= 3.10.12/3.11.4)."""
    try:
        with tarfile.open(archive, "r:") as tar:
            members = tar.getmembers()  # reads to the end: a truncated entry fails here
            odd = [m.name for m in members if not (m.isfile() or m.isdir())]
            if odd:
                return [f"{odd[0]}: not a regular file or folder"]
            staging.mkdir()
            tar.extractall(staging, filter="data")
    except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
        return [f"unreadable entry, truncated or not made by kbuild: {_one_line(e)}"]
    return []


def verify_entry(folder: Path, input_id: str, variant: str) -> list[str]:
    """Why an unpacked entry must not be installed as `variant` for `input_id` (empty: it may)."""
    try:
        metadata = load_json_file(folder / "metadata.json")
    except (OSError, JsonFileError) as e:
        return [f"metadata.json: {_one_line(e)}"]
    stamp = metadata.get("kbuild") if isinstance(metadata, dict) else None
    if not isinstance(stamp, dict) or stamp.get("input-hash") != input_id:
        found = stamp.get("input-hash") if isinstance(stamp, dict) else None
        return [f"it holds the build of another input id ({found})"]
    if stamp.get("variant") != variant:
        return [f"it holds variant {stamp.get('variant')}, not {variant}"]
    return verify_digest(folder, metadata)


def _is_local(fs) -> bool:
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return any(p in _LOCAL for p in protocols)


def _one_line(error: BaseException) -> str:
    text = getattr(error, "message", None) or str(error) or type(error).__name__
    return " ".join(text.split())
