"""Importing a variant's package from verified bytes only.

Python's own finders would prefer a `__pycache__/*.pyc` whose header matches the source's
mtime and size, and would load a stray sourceless `x.pyc`: neither is covered by the digest,
so a planted one would run in place of the verified source. Instead, one meta path finder
serves the package (imported under its metadata id) and all its submodules itself: each
module's source is read, checked against its digest on that very read, and compiled with
`source_to_code`; no bytecode cache is read or written. A name the verified files do not
hold is not found, rather than handed on to the path finders.

A verified variant's native libraries, whether `_ops.py` loads them through torch or they
are extension modules, are mapped from the bytes checked on their one read
(runtime/native_library.py), never reopened by path.

Both build layouts: `files` (the package is the variant folder, or its `<python name>/`
folder) and `zip` (the package is `<id>.zip`, whose bytes are read and checked once and
then served from memory; extension modules and the native library lie beside it).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import io
import os
import stat
import sys
import threading
import zipfile
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader, ModuleSpec
from importlib.readers import FileReader
from pathlib import Path

import kernel_builder.runtime.native_library as native_library
from kernel_builder.runtime.digest import digest_bytes
from kernel_builder.runtime.files import read_regular
from kernel_builder.runtime.zip_package import INIT, ArchiveResources


_NATIVE = (".so", ".dylib")


class TamperedError(ImportError):
    """A file differs from its digest when read for import (it changed after the check)."""


class VerifiedPackage:
    """Where the modules of one imported variant come from. `expected` maps each file
    (POSIX path relative to `folder`) to its digest; None loads unverified (verify=False),
    still from source only."""

    def __init__(self, module_id: str, folder: Path, expected: dict[str, str] | None, algorithm: str,
                 *, package_dir: str = "", archive: Path | None = None):
        self.module_id, self.folder = module_id, folder
        self.expected, self.algorithm = expected, algorithm
        self.package_dir = package_dir  # "" or "<python name>": the files layout's package
        self.archive_file = archive
        self.archive: zipfile.ZipFile | None = None
        if archive is not None:
            rel = archive.name
            self.archive = zipfile.ZipFile(io.BytesIO(self.read(rel)))

    # -- bytes ----------------------------------------------------------------------------
    def has_file(self, rel: str) -> bool:
        if self.expected is not None:
            return rel in self.expected
        try:  # unverified: a link to a regular file (a huggingface_hub cache) serves too
            return stat.S_ISREG(os.stat(self.folder / rel).st_mode)
        except OSError:
            return False

    def has_folder(self, rel: str) -> bool:
        if self.expected is not None:
            return any(name.startswith(rel + "/") for name in self.expected)
        try:
            return stat.S_ISDIR(os.lstat(self.folder / rel).st_mode)
        except OSError:
            return False

    def read(self, rel: str) -> bytes:
        """The bytes of the variant's file `rel`, checked against its digest on this read."""
        path = self.folder / rel
        try:
            data = read_regular(path)
        except OSError as e:
            raise ImportError(f"cannot read {path}: {e.strerror or e}") from None
        if self.expected is not None and digest_bytes(data, self.algorithm) != self.expected.get(rel):
            raise TamperedError(
                f"{path} no longer matches its digest in metadata.json (it changed after the variant "
                "was checked); nothing of it was run. Rebuild or download the kernel again."
            )
        return data

    def serves_native_libraries(self) -> bool:
        """Whether its native libraries load from their verified bytes (native_library.py)."""
        return self.expected is not None and native_library.supported() and any(
            name.endswith(_NATIVE) or ".so." in name for name in self.expected
        )

    # -- finding modules ----------------------------------------------------------------------
    def root_spec(self) -> ModuleSpec | None:
        return self.find_spec(self.module_id)

    def find_spec(self, fullname: str) -> ModuleSpec | None:
        parts = fullname.split(".")[1:]
        spec = self._in_folder(fullname, parts)
        if spec is None and self.archive is not None:
            spec = self._in_archive(fullname, parts)
        return spec

    def _in_folder(self, fullname: str, parts: list[str]) -> ModuleSpec | None:
        rel = "/".join(p for p in (self.package_dir, *parts) if p)
        init = f"{rel}/{INIT}" if rel else INIT
        if self.has_file(init):
            return self._source_spec(fullname, init, self.folder / init, [str(self.folder / rel)] + self._archive_dirs(parts))
        if not parts:
            return None
        for suffix in EXTENSION_SUFFIXES:
            if self.has_file(rel + suffix):
                path = str(self.folder / (rel + suffix))
                loader_type = VerifiedExtensionLoader if self.serves_native_libraries() else ExtensionFileLoader
                return importlib.util.spec_from_file_location(fullname, path, loader=loader_type(fullname, path))
        if self.has_file(rel + ".py"):
            return self._source_spec(fullname, rel + ".py", self.folder / (rel + ".py"), None)
        if self.has_folder(rel):
            spec = ModuleSpec(fullname, None, is_package=True)  # a namespace package
            spec.submodule_search_locations = [str(self.folder / rel)]
            return spec
        return None

    def _archive_dirs(self, parts: list[str]) -> list[str]:
        if self.archive_file is None:
            return []
        return [os.path.join(self.archive_file, *parts)]

    def _in_archive(self, fullname: str, parts: list[str]) -> ModuleSpec | None:
        assert self.archive is not None and self.archive_file is not None
        names = set(self.archive.namelist())
        member = "/".join([*parts, INIT])
        if member in names:
            locations = [str(self.folder.joinpath(*parts)), os.path.join(self.archive_file, *parts)]
            return self._source_spec(fullname, member, Path(self.archive_file, member), locations, in_archive=True)
        member = "/".join(parts) + ".py"
        if parts and member in names:
            return self._source_spec(fullname, member, Path(self.archive_file, member), None, in_archive=True)
        return None

    def _source_spec(self, fullname: str, key: str, origin: Path, locations: list[str] | None,
                     *, in_archive: bool = False) -> ModuleSpec:
        loader = VerifiedSourceLoader(self, key, str(origin), locations is not None, in_archive)
        spec = importlib.util.spec_from_file_location(
            fullname, str(origin), loader=loader, submodule_search_locations=locations
        )
        assert spec is not None  # a loader is given, so there is always a spec
        return spec


class VerifiedSourceLoader(importlib.abc.SourceLoader):
    """Compiles one module from its verified source bytes. No bytecode is read or written:
    get_code is the whole story (SourceLoader only lends get_source and exec_module)."""

    def __init__(self, package: VerifiedPackage, key: str, origin: str, is_package: bool, in_archive: bool):
        self._package, self._key, self._in_archive = package, key, in_archive
        self.path, self._is_package = origin, is_package  # `path`: what FileReader reads

    def get_filename(self, fullname: str) -> str:
        return self.path

    def get_data(self, path: str) -> bytes:
        if path != self.path:
            raise OSError(f"{path} is not served: only a module's own verified source is")
        if self._in_archive:
            assert self._package.archive is not None
            return self._package.archive.read(self._key)
        return self._package.read(self._key)

    def get_code(self, fullname: str):
        return self.source_to_code(self.get_data(self.path), self.path)

    def is_package(self, fullname: str) -> bool:
        return self._is_package

    def get_resource_reader(self, fullname: str):
        if not self._is_package:
            return None
        if self._in_archive:
            assert self._package.archive_file is not None
            return ArchiveResources(self._package.archive_file)
        return FileReader(self)


class VerifiedExtensionLoader(ExtensionFileLoader):
    """An extension module of a verified variant, created from its verified bytes (a memfd)
    rather than from its path; the module's __file__ is still its path in the variant."""

    def create_module(self, spec):
        memfd = native_library.verified_library_path(self.path)
        if memfd is None:  # its variant is not registered (not imported by load_local)
            raise ImportError(f"{self.path} is not a file of a verified variant", name=self.name)
        origin, spec.origin = spec.origin, memfd
        try:
            module = super().create_module(spec)
        finally:
            spec.origin = origin
        module.__file__ = origin  # single-phase init sets it to the memfd's name
        return module


class _Finder(importlib.abc.MetaPathFinder):
    """First on sys.meta_path: answers for every name under a package imported here. Ids
    are identifiers (no dots), so a module's first name part is its package's id."""

    def __init__(self):
        self.packages: dict[str, VerifiedPackage] = {}

    def find_spec(self, fullname, path=None, target=None):
        package = self.packages.get(fullname.partition(".")[0])
        if package is None:
            return None
        spec = package.find_spec(fullname)
        if spec is None:
            # Not handed on: the path finders would take a stray .pyc the digest skips.
            raise ModuleNotFoundError(f"No module named {fullname!r} in {package.folder}", name=fullname)
        return spec


_finder = _Finder()
_lock = threading.Lock()


def register(package: VerifiedPackage) -> None:
    with _lock:
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
        _finder.packages[package.module_id] = package
    if package.serves_native_libraries():
        native_library.register_variant(package.folder, package.read)


def registered(module_id: str) -> VerifiedPackage | None:
    """The package this process imports `module_id` from, if kbuild's loader registered one."""
    with _lock:
        return _finder.packages.get(module_id)


def unregister(module_id: str) -> None:
    with _lock:
        package = _finder.packages.pop(module_id, None)
    if package is not None:
        native_library.unregister_variant(package.folder)
