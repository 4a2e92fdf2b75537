"""Persistence for the Hub test server: git objects, LFS objects, repos and their refs.

Layout under the root folder:

    objects/ab/cdef...           git objects ("<kind> <size>\\0<body>"), named by their sha1
    lfs/ab/cd/<sha256>           LFS contents, named by their sha256
    repos/<type>s/<ns>/<name>/
        repo.json                {"private": bool, "createdAt": ...}
        refs.json                {"heads": {...}, "tags": {...}, "prs": {...}} -> commit sha
        commits/<sha>            one empty marker per commit made in this repo
    secret                       the key that signs LFS upload URLs

Objects are content-addressed the way git does it, so a commit sha names one tree, parent
and message forever: a client cache keyed by sha never goes stale. Every file is written to
a temporary name and renamed into place, and a commit only becomes visible when refs.json
names it, so a killed writer leaves at most unreferenced objects behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from kernel_builder.hub_names import repo_id_problem

EMPTY_REFS = {"heads": {}, "tags": {}, "prs": {}}
LFS_POINTER_HEADER = b"version https://git-lfs.github.com/spec/v1\n"
_POINTER_RE = re.compile(rb"version https://git-lfs\.github\.com/spec/v1\noid sha256:([0-9a-f]{64})\nsize (\d+)\n")
_SHA1_RE = re.compile(r"[0-9a-f]{40}")
SHA256_RE = re.compile(r"[0-9a-f]{64}")

# The LFS patterns a new Hub repo's .gitattributes starts with (a subset of the Hub's list).
DEFAULT_LFS_PATTERNS = (
    "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gz", "*.h5", "*.joblib",
    "*.lfs.*", "*.mlmodel", "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.ot",
    "*.parquet", "*.pb", "*.pickle", "*.pkl", "*.pt", "*.pth", "*.rar", "*.safetensors",
    "saved_model/**/*", "*.tar.*", "*.tar", "*.tflite", "*.tgz", "*.wasm", "*.xz", "*.zip",
    "*.zst", "*tfevents*",
)
DEFAULT_GITATTRIBUTES = "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in DEFAULT_LFS_PATTERNS).encode()


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def lfs_pointer(oid: str, size: int) -> bytes:
    """The text git stores in place of an LFS file."""
    return LFS_POINTER_HEADER + f"oid sha256:{oid}\nsize {size}\n".encode()


@dataclasses.dataclass(frozen=True)
class File:
    """A file of a commit: `blob` is its git blob (for LFS files, the pointer's)."""

    blob: str
    size: int
    lfs_oid: str | None = None
    pointer_size: int | None = None

    @property
    def etag(self) -> str:
        # The Hub's ETag (and the oid preupload compares) is the sha256 for LFS files.
        return self.lfs_oid or self.blob


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A commit's tree, flattened: file paths and directory paths ('' = root) -> tree sha."""

    files: dict[str, File]
    dirs: dict[str, str]


@dataclasses.dataclass(frozen=True)
class Commit:
    sha: str
    tree: str
    parents: tuple[str, ...]
    author: str
    timestamp: int
    message: str

    @property
    def title(self) -> str:
        return self.message.split("\n", 1)[0]

    @property
    def body(self) -> str:
        parts = self.message.split("\n\n", 1)
        return parts[1] if len(parts) > 1 else ""

    @property
    def date(self) -> str:
        return iso_time(self.timestamp)


def iso_time(timestamp: float) -> str:
    """The Hub's date format, e.g. 2026-01-02T03:04:05.000Z."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(timestamp)) + f".{int(timestamp * 1000) % 1000:03d}Z"


@dataclasses.dataclass(frozen=True)
class RevisionTarget:
    """A resolved revision: the commit, and the ref it came from (kind is heads, tags, prs or None)."""

    sha: str
    kind: str | None = None
    name: str | None = None


class Repo:
    """One repository's folder: its settings, refs and the commits made in it."""

    def __init__(self, store: HubStore, repo_type: str, repo_id: str, path: Path):
        self.store, self.type, self.id, self.path = store, repo_type, repo_id, path

    def exists(self) -> bool:
        return (self.path / "refs.json").is_file()

    @property
    def settings(self) -> dict:
        return json.loads((self.path / "repo.json").read_text())

    def update_settings(self, **changes) -> None:
        with self.locked():
            atomic_write(self.path / "repo.json", json.dumps({**self.settings, **changes}).encode())

    @property
    def private(self) -> bool:
        return bool(self.settings.get("private"))

    def refs(self) -> dict[str, dict[str, str]]:
        return {**EMPTY_REFS, **json.loads((self.path / "refs.json").read_text())}

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Serialise writers of this repo, across threads and processes."""
        with open(self.path / ".lock", "a+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def update_refs(self, change: Callable[[dict], object]) -> object:
        """Apply `change` to the refs under the repo lock and write them back atomically."""
        with self.locked():
            refs = self.refs()
            result = change(refs)
            atomic_write(self.path / "refs.json", json.dumps(refs, indent=1, sort_keys=True).encode())
            return result

    def has_commit(self, sha: str) -> bool:
        return bool(_SHA1_RE.fullmatch(sha)) and (self.path / "commits" / sha).is_file()

    def add_commit(self, sha: str) -> None:
        marker = self.path / "commits" / sha
        if not marker.exists():
            atomic_write(marker, b"")

    def resolve(self, revision: str) -> RevisionTarget | None:
        """A branch, tag, full ref name (refs/heads/x, refs/tags/x, refs/pr/N) or commit sha."""
        refs = self.refs()
        for prefix, kind in (("refs/heads/", "heads"), ("refs/tags/", "tags"), ("refs/pr/", "prs")):
            if revision.startswith(prefix):
                name = revision[len(prefix):]
                sha = refs[kind].get(name)
                return RevisionTarget(sha, kind, name) if sha else None
        for kind in ("heads", "tags"):
            if revision in refs[kind]:
                return RevisionTarget(refs[kind][revision], kind, revision)
        if self.has_commit(revision):
            return RevisionTarget(revision)
        return None

    def history(self, sha: str) -> Iterator[Commit]:
        """Commits from `sha` back to the first one, following first parents."""
        current: str | None = sha
        while current:
            commit = self.store.commit(current)
            yield commit
            current = commit.parents[0] if commit.parents else None


class HubStore:
    """The server's folder: shared object stores and the repos that point into them."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._snapshots: dict[str, Snapshot] = {}  # tree sha -> snapshot; trees never change
        self._snapshots_lock = threading.Lock()
        secret = self.root / "secret"
        if not secret.exists():
            # Written aside and linked into place: a second server on this root sees all or nothing.
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-")
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
            with contextlib.suppress(FileExistsError):
                os.link(tmp, secret)
            os.unlink(tmp)
        self.secret = secret.read_text().strip().encode()

    # -- repos ------------------------------------------------------------------------
    def repo(self, repo_type: str, repo_id: str) -> Repo:
        # The API refuses such ids first (400); this keeps any other caller inside the root too.
        problem = repo_id_problem(repo_id)
        if problem:
            raise ValueError(f"invalid repo id {repo_id!r}: {problem}")
        return Repo(self, repo_type, repo_id, self.root / "repos" / f"{repo_type}s" / repo_id)

    def holds_namespace(self, namespace: str) -> bool:
        """Whether any repo, of any type, lives under `namespace`."""
        return any(folder.is_dir() and any(not p.name.startswith(".") for p in folder.iterdir())
                   for folder in (self.root / "repos").glob(f"*/{namespace}"))

    def create_repo(self, repo_type: str, repo_id: str, *, private: bool, author: str) -> Repo | None:
        """A new repo whose main branch holds the initial .gitattributes; None if it exists."""
        repo = self.repo(repo_type, repo_id)
        if repo.exists():
            return None
        blob = self.write_object("blob", DEFAULT_GITATTRIBUTES)
        tree = self.write_tree({".gitattributes": File(blob, len(DEFAULT_GITATTRIBUTES))})
        sha = self.write_commit(tree, (), author, "initial commit")
        # Build the repo in a scratch folder and rename it into place: all or nothing.
        repo.path.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=repo.path.parent, prefix=".new-"))
        try:
            atomic_write(scratch / "repo.json", json.dumps({"private": private, "createdAt": time.time()}).encode())
            atomic_write(scratch / "commits" / sha, b"")
            atomic_write(scratch / "refs.json", json.dumps({**EMPTY_REFS, "heads": {"main": sha}}).encode())
            os.rename(scratch, repo.path)
        except OSError:
            shutil.rmtree(scratch, ignore_errors=True)
            if repo.exists():
                return None
            raise
        return repo

    def delete_repo(self, repo: Repo) -> None:
        trash = Path(tempfile.mkdtemp(dir=self.root, prefix=".trash-"))
        os.rename(repo.path, trash / "repo")
        shutil.rmtree(trash, ignore_errors=True)

    # -- git objects --------------------------------------------------------------------
    def _object_path(self, sha: str) -> Path:
        return self.root / "objects" / sha[:2] / sha[2:]

    def write_object(self, kind: str, body: bytes) -> str:
        data = f"{kind} {len(body)}".encode() + b"\0" + body
        sha = hashlib.sha1(data).hexdigest()
        path = self._object_path(sha)
        if not path.exists():
            atomic_write(path, data)
        return sha

    def read_object(self, sha: str) -> tuple[str, bytes]:
        data = self._object_path(sha).read_bytes()
        header, _, body = data.partition(b"\0")
        kind, _, _size = header.decode().partition(" ")
        return kind, body

    def write_tree(self, files: dict[str, File]) -> str:
        """Write the nested git trees for a flat {path: File} map; returns the root tree sha."""
        root: dict = {}
        for path, file in files.items():
            node = root
            *folders, name = path.split("/")
            for folder in folders:
                node = node.setdefault(folder, {})
            node[name] = file
        return self._write_tree_node(root)

    def _write_tree_node(self, node: dict) -> str:
        entries = []
        for name, child in node.items():
            if not name or "\0" in name:  # would end the entry early and corrupt the tree for good
                raise ValueError(f"invalid name in a git tree: {name!r}")
            if isinstance(child, dict):
                entries.append((name + "/", b"40000", name, self._write_tree_node(child)))
            else:
                entries.append((name, b"100644", name, child.blob))
        entries.sort()  # git orders a folder as if its name ended with '/'
        body = b"".join(mode + b" " + name.encode() + b"\0" + bytes.fromhex(sha) for _, mode, name, sha in entries)
        return self.write_object("tree", body)

    def snapshot(self, tree_sha: str) -> Snapshot:
        with self._snapshots_lock:
            cached = self._snapshots.get(tree_sha)
        if cached is None:
            files: dict[str, File] = {}
            dirs: dict[str, str] = {}
            self._read_tree(tree_sha, "", files, dirs)
            cached = Snapshot(files, dirs)
            with self._snapshots_lock:
                self._snapshots[tree_sha] = cached
        return cached

    def _read_tree(self, sha: str, prefix: str, files: dict[str, File], dirs: dict[str, str]) -> None:
        dirs[prefix.rstrip("/")] = sha
        _, body = self.read_object(sha)
        pos = 0
        while pos < len(body):
            space = body.index(b" ", pos)
            nul = body.index(b"\0", space)
            mode, name = body[pos:space], body[space + 1:nul].decode()
            child = body[nul + 1:nul + 21].hex()
            pos = nul + 21
            if mode == b"40000":
                self._read_tree(child, f"{prefix}{name}/", files, dirs)
            else:
                files[prefix + name] = self._file(child)

    def _file(self, blob: str) -> File:
        _, data = self.read_object(blob)
        match = _POINTER_RE.fullmatch(data) if data.startswith(LFS_POINTER_HEADER) else None
        if match:
            return File(blob, int(match[2]), match[1].decode(), len(data))
        return File(blob, len(data))

    def blob_bytes(self, blob: str) -> bytes:
        return self.read_object(blob)[1]

    def write_commit(self, tree: str, parents: tuple[str, ...], author: str, message: str) -> str:
        stamp = f"{author} <{author}@users.noreply.huggingface.co> {int(time.time())} +0000"
        lines = [f"tree {tree}", *(f"parent {p}" for p in parents), f"author {stamp}", f"committer {stamp}"]
        return self.write_object("commit", ("\n".join(lines) + "\n\n" + message + "\n").encode())

    def commit(self, sha: str) -> Commit:
        _, body = self.read_object(sha)
        head, _, message = body.decode().partition("\n\n")
        fields: dict[str, list[str]] = {}
        for line in head.split("\n"):
            key, _, value = line.partition(" ")
            fields.setdefault(key, []).append(value)
        identity, timestamp, _zone = fields["author"][0].rsplit(" ", 2)
        return Commit(sha, fields["tree"][0], tuple(fields.get("parent", ())), identity.split(" <")[0],
                      int(timestamp), message.rstrip("\n"))

    # -- LFS objects --------------------------------------------------------------------
    def lfs_path(self, oid: str) -> Path:
        return self.root / "lfs" / oid[:2] / oid[2:4] / oid

    def lfs_size(self, oid: str) -> int | None:
        """The stored object's size, or None when the server lacks it."""
        if not SHA256_RE.fullmatch(oid):
            return None
        try:
            return self.lfs_path(oid).stat().st_size
        except FileNotFoundError:
            return None

    def put_lfs(self, oid: str, size: int, source: BinaryIO) -> str | None:
        """Store `size` bytes from `source` as object `oid`; returns an error message or None."""
        if not SHA256_RE.fullmatch(oid):
            return f"{oid!r} is not a sha256"
        path = self.lfs_path(oid)
        path.parent.mkdir(parents=True, exist_ok=True)
        digest, received = hashlib.sha256(), 0
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".upload-")
        try:
            with os.fdopen(fd, "wb") as f:
                while chunk := source.read(1 << 20):
                    digest.update(chunk)
                    received += len(chunk)
                    f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
            if received != size:
                return f"expected {size} bytes, received {received}"
            if digest.hexdigest() != oid:
                return f"content does not match sha256 {oid}"
            os.replace(tmp, path)
            return None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
