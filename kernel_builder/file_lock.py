"""Exclusive flocks between kbuild processes, with the holder's pid for the waiting message.

The kernel releases a flock when its holder exits, however it exits (SIGKILL included), so
a lock never outlives a crashed run. A lock taken with `inherit=True` is also held by the
build tools kbuild starts (cmake._run passes `inherited_lock_fds()` to them): if kbuild is
killed, compilers it left running keep the lock until they finish, so the next build
waits for them instead of racing them in the same work tree. The lock file itself may be deleted while held (prune
does); a waiter notices and locks the file that is there now."""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

# Called once before blocking, with the holder's pid when it has recorded one.
OnWait = Callable[[int | None], None]

_inherited: set[int] = set()  # fds of held locks that child build tools share


@contextmanager
def exclusive_lock(path: Path, blocking: bool = True, on_wait: OnWait | None = None, inherit: bool = False) -> Iterator[bool]:
    """Hold an exclusive flock on `path`. Yields False instead of waiting when not blocking.
    With `inherit`, build tools started while it is held hold it too (module docstring)."""
    fd = _acquire(path, blocking, on_wait)
    if fd is not None and inherit:
        _inherited.add(fd)
    try:
        yield fd is not None
    finally:
        if fd is not None:
            _inherited.discard(fd)
            os.close(fd)


def inherited_lock_fds() -> tuple[int, ...]:
    """The fds to pass to a child build tool (subprocess pass_fds)."""
    return tuple(sorted(_inherited))


def lock_holder(path: Path) -> int | None:
    """The pid the current (or last) holder of `path` recorded, if any."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _acquire(path: Path, blocking: bool, on_wait: OnWait | None) -> int | None:
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not blocking:
                    os.close(fd)
                    return None
                if on_wait:
                    on_wait(lock_holder(path))
                    on_wait = None  # say it once, even if the file is replaced while we wait
                fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.stat(path).st_ino
            except FileNotFoundError:
                current = None
        except BaseException:
            os.close(fd)
            raise
        if current == os.fstat(fd).st_ino:
            _record_holder(fd)
            return fd
        os.close(fd)  # the file was deleted while we waited: lock the one there now


def _record_holder(fd: int) -> None:
    # One fixed-width write over the old pid: a waiter reading meanwhile sees the old
    # holder's pid or the new one, never an empty or half-written file.
    record = f"{os.getpid():>12}\n".encode()
    os.pwrite(fd, record, 0)
    os.ftruncate(fd, len(record))


def abandoned(locks: Iterable[Path]) -> Iterator[Path]:
    """Each of `locks` that no process holds (its holder ended, however), held while the
    caller removes what that holder left, then deleted."""
    for lock in locks:
        with exclusive_lock(lock, blocking=False) as free:
            if free:
                yield lock
                lock.unlink(missing_ok=True)
