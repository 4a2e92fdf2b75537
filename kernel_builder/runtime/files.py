"""Reading the runtime's inputs without trusting them: a variant's files, metadata.json, the
cache's records and lock files may be planted or corrupted, so reading one must neither hang
(a FIFO, a device) nor exhaust memory or the stack (huge or deeply nested JSON), and every
failure is one line naming the file. Standard library only."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

MAX_JSON_BYTES = 64 << 20  # a metadata.json listing ~100k files is well under this
MAX_JSON_DEPTH = 64  # metadata, cache records and lock files nest 4 levels at most
_CHUNK = 1 << 20
# A JSON string (skipped whole, so brackets inside it do not count) or a bracket.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


class NotRegularFileError(OSError):
    """The path is a FIFO, device, socket or folder: opening or reading it could block forever."""


def open_regular(path: str | os.PathLike, *, follow_symlinks: bool = True) -> int:
    """A read-only descriptor of `path`, refused (NotRegularFileError) unless it is a regular
    file. O_NONBLOCK keeps opening a FIFO from waiting for a writer; the type is checked on
    the open descriptor, so a file swapped after an earlier check is caught too."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(f"{os.fspath(path)} is {describe_mode(mode)}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def describe_mode(mode: int) -> str:
    """What kind of entry an st_mode is, in words."""
    for test, words in (
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(mode):
            return words
    return "an unknown kind of entry"


def read_regular(path: str | os.PathLike, *, limit: int | None = None, follow_symlinks: bool = True) -> bytes:
    """The bytes of the regular file `path`; NotRegularFileError for anything else, and
    for a file over `limit` bytes (read no further than that)."""
    fd = open_regular(path, follow_symlinks=follow_symlinks)
    with os.fdopen(fd, "rb") as f:
        data = f.read() if limit is None else f.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise NotRegularFileError(f"{os.fspath(path)} is larger than {limit >> 20} MiB")
    return data


class JsonFileError(ValueError):
    """A JSON file that cannot be used; the message is one line naming the file."""


def load_json_file(file: Path) -> object:
    """The JSON value in `file`, read as UTF-8 with bounded size and nesting depth.
    FileNotFoundError passes through (callers word a missing file themselves); every other
    problem is a JsonFileError whose message names the file and what is wrong with it."""
    try:
        data = read_regular(file, limit=MAX_JSON_BYTES)
    except FileNotFoundError:
        raise
    except NotRegularFileError as e:
        raise JsonFileError(str(e)) from None  # names the file already
    except OSError as e:
        raise JsonFileError(f"cannot read {file}: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise JsonFileError(f"{file} is not UTF-8 text (byte {e.start} is invalid)") from None
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise JsonFileError(f"{file} nests JSON {depth} levels deep (at most {MAX_JSON_DEPTH} are read)")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise JsonFileError(f"{file} is not valid JSON ({e})") from None


def json_depth(text: str) -> int:
    """How deeply `text`'s arrays and objects nest, without parsing it (brackets inside
    strings do not count), so a hostile file is refused before the recursive parser sees it."""
    depth = deepest = 0
    for token in _JSON_TOKEN.finditer(text):
        bracket = token.group()
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif bracket in "]}":
            depth -= 1
    return deepest
