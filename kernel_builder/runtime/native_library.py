"""Loading a verified variant's native libraries from exactly the bytes that were checked.

A variant's `_ops.py` loads its library by path (`torch.ops.load_library(<the .so beside
it>)`), after the loader checked the folder: a library swapped in between would run its
constructors unchecked. So while kbuild imports a verified variant, a load of one of its
files is served from memory instead: the file is read once, checked against its digest on
that read (verified_import.VerifiedPackage.read), written to a sealed memfd, and the memfd is
what gets mapped. Any other path passes through to torch unchanged, and the variant's files
stay as they are, so the `kernels` runtime loads the same folders by path as before.

torch.ops.load_library is wrapped once, when the first verified variant holding a native
library is imported; extension modules of a verified variant (verified_import.py) go
through `verified_library_path` too. Linux only (memfd_create); elsewhere libraries load
by path, as before. Standard library only (torch is imported only to wrap it).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import threading
from collections.abc import Callable

# A memfd stays open for the life of the process: its `/proc/self/fd/N` is the name the
# dynamic loader keeps for the library, and a reused number would make a later dlopen of
# another library's memfd return this one.
#
# Paths are matched as named, never resolved: a file swapped for a link to elsewhere is still
# a file of the variant, read (and refused) by its digest; a huggingface_hub cache's files are
# links into its blobs/ by design.
_open_memfds: dict[str, str] = {}  # absolute path of a verified file -> its memfd's path
_readers: dict[str, Callable[[str], bytes]] = {}  # absolute variant folder -> its verified read(rel)
_lock = threading.RLock()
_wrapped = False
_SEALS = ("F_SEAL_SEAL", "F_SEAL_SHRINK", "F_SEAL_GROW", "F_SEAL_WRITE")


def supported() -> bool:
    """Whether libraries can be mapped from memory here (Linux); elsewhere they load by path."""
    return hasattr(os, "memfd_create")


def register_variant(folder: str | os.PathLike, read: Callable[[str], bytes]) -> None:
    """Serve loads of files under `folder` by `read(rel)`, which returns a file's verified
    bytes (or raises), and wrap torch.ops.load_library if that is not done yet."""
    global _wrapped
    with _lock:
        _readers[os.path.abspath(folder)] = read
        if not _wrapped:
            try:
                import torch
            except ImportError:  # nothing can load a library through torch then
                return
            original = torch.ops.load_library

            def load_library(path):
                # Loaded by path already (before kbuild verified it: the python-name shim of
                # `kbuild test`, kernels' own loader): loading it by path again maps nothing
                # and runs no code, while a memfd copy would register its ops a second time,
                # which torch aborts on.
                memfd = None if _loaded_by_path(path) else verified_library_path(path)
                if memfd is None:
                    return original(path)
                # torch.ops.load_library's own steps, on the memfd (torch would resolve its
                # /proc/self/fd link to a name that cannot be opened).
                ctypes.CDLL(memfd)
                torch.ops.loaded_libraries.add(os.path.abspath(path))

            torch.ops.load_library = load_library
            _wrapped = True


def unregister_variant(folder: str | os.PathLike) -> None:
    with _lock:
        _readers.pop(os.path.abspath(folder), None)


def verified_library_path(path: str | os.PathLike) -> str | None:
    """A path holding exactly the verified bytes of `path` when it is a file of a registered
    variant (read and checked now, once per file), else None."""
    file = os.path.abspath(path)
    with _lock:
        if file in _open_memfds:
            return _open_memfds[file]
        for folder, read in _readers.items():
            if file != folder and os.path.commonpath([file, folder]) == folder:
                rel = os.path.relpath(file, folder).replace(os.sep, "/")
                memfd = _memfd(os.path.basename(file), read(rel))
                _open_memfds[file] = memfd
                return memfd
    return None


def _loaded_by_path(path: str | os.PathLike) -> bool:
    """Whether the dynamic loader already holds the library at `path` (RTLD_NOLOAD maps
    nothing when it does not)."""
    import _ctypes  # the dlopen under ctypes.CDLL, with its handle to give back

    try:
        handle = _ctypes.dlopen(os.path.abspath(path), os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return False
    _ctypes.dlclose(handle)
    return True


def _memfd(name: str, data: bytes) -> str:
    fd = os.memfd_create(name, os.MFD_CLOEXEC | getattr(os, "MFD_ALLOW_SEALING", 0))
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        seals = 0
        for seal in _SEALS:
            seals |= getattr(fcntl, seal, 0)
        if seals and hasattr(fcntl, "F_ADD_SEALS"):
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)  # nothing can change the bytes from here on
    except BaseException:
        os.close(fd)
        raise
    return f"/proc/self/fd/{fd}"
