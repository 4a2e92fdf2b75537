"""Folders and files that are this user's alone, checked on every use, not only when made.

Another local user must not choose what kbuild's compiles read (the fixed compile links),
connect to its compiler servers (sccache's sockets) or read its secrets (the sccache-dist
token). A folder under /tmp can be made by anyone before kbuild runs, and a file can be left
with loose permissions by an older kbuild or a careless hand, so:

- `own_folder(parent, *names)` is parent/kbuild-<uid>/names..., each folder made 0700; one
  that is a link, belongs to another user or that others may write to is refused in one
  line (they may have planted something in it); one of ours that others may only read is
  made 0700 again;
- `write_secret(path, text)` writes through a new 0600 file renamed into place (never a
  moment with the umask's permissions), unless `path` already is a regular file of ours,
  0600, with that text.

Example:
    >>> sockets = own_folder(Path("/tmp"), "sccache")   # /tmp/kbuild-1000/sccache, drwx------
    >>> write_secret(sockets.parent / "token", "s3cret")
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from kernel_builder.errors import BuildError


def own_folder(parent: Path, *names: str) -> Path:
    """parent/kbuild-<uid>/names..., every folder from kbuild-<uid> down this user's alone."""
    folder = parent / f"kbuild-{os.getuid()}"
    _own(folder)
    for name in names:
        folder = folder / name
        _own(folder)
    return folder


def _own(folder: Path) -> None:
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise BuildError(f"cannot make {folder}, a folder of this user's alone: {e.strerror}") from None
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise BuildError(
            f"{folder} is not a folder of this user's alone (another user could plant files or connect there); "
            "remove it and build again")
    if info.st_mode & 0o077:
        os.chmod(folder, 0o700)  # ours, and nobody else could write to it: just close it


def write_secret(path: Path, text: str) -> None:
    """`path` holds `text`, readable by this user alone."""
    if _is_private_with(path, text):
        return
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(temporary, path)  # replaces a link there, never writes through it
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _is_private_with(path: Path, text: str) -> bool:
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            return False
        return path.read_text() == text
    except (OSError, UnicodeDecodeError):
        return False
