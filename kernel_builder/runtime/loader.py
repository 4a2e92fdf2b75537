"""`load_local`: find this machine's variant folder, check its metadata and digests, and
import it as a package under its unique id, so relative imports work and two builds of one
kernel can live in one process. Both build layouts load: `files` (the package is the folder)
and `zip` (the package is `<id>.zip` in it, kernel_builder.runtime.zip_package). Standard
library only (torch is imported to detect the system)."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from kernel_builder.errors import KbuildError
from kernel_builder.runtime.digest import verify_digest
from kernel_builder.runtime.files import JsonFileError, load_json_file
from kernel_builder.runtime.kernels_interop import record_loaded
from kernel_builder.runtime.select import Decision, check_variant, select_variant
from kernel_builder.runtime.signatures import SignaturePolicy, enforce
from kernel_builder.runtime.system import System, detect_system
from kernel_builder.runtime.verified_import import TamperedError, VerifiedPackage, register, registered, unregister
from kernel_builder.runtime.zip_package import INIT, LAYOUTS, ZIP, archive_path, layout_of
from kernel_builder.variants import try_parse

# Every key the `kernels` runtime requires in metadata.json, with the JSON type it must have.
REQUIRED_KEYS: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "name": (str,),
    "version": (int,),
    "license": (str,),
    "python-depends": (list,),
    "backend": (dict,),
    "digest": (dict,),
    "provenance": (dict,),
}
_JSON_TYPE = {str: "a string", int: "an integer", list: "a list", dict: "a table"}
# `kernels-minver` is the oldest `kernels` package that loads the variant (kernels parses
# exactly three numbers). It is not a kbuild version: kbuild's loader checks only that it is
# well formed and then loads every layout it knows (LAYOUTS) itself.
_KERNELS_MINVER = re.compile(r"\d+\.\d+\.\d+")
_MAX_LISTED = 5
# kernels' KernelName: what a kernel's `name` may be (it names the nested package folder).
_KERNEL_NAME = re.compile(r"[a-z][-a-z0-9]*[a-z0-9]")

_loaded: dict[Path, ModuleType] = {}
_lock = threading.RLock()


class KernelLoadError(KbuildError):
    """No variant fits this machine, or the chosen variant cannot be imported as built."""


class SignatureRefusedError(KernelLoadError):
    """In `require` mode (runtime/signatures.py): a variant is unsigned, its signature is broken,
    or its signer is not one the policy trusts."""


class DigestMismatchError(KernelLoadError):
    """A variant folder's files do not match the digests in its metadata.json."""

    def __init__(self, message: str, *, path: Path | None = None, violations: list[str] | None = None):
        super().__init__(message)
        self.path = path
        self.violations = list(violations or [])


# -- finding the variant folder ---------------------------------------------------------
# kbuild's install (kernel_builder.assemble.stamp) stages a variant under STAGING_PREFIX; on a filesystem
# without an atomic exchange it moves the variant it replaces to STAGING_PREFIX + REPLACED +
# "<variant>-<pid>" for a moment, where a killed build leaves it until the next build.
STAGING_PREFIX = ".kbuild-staging-"
REPLACED = "old-"


def replaced_variant(name: str) -> str | None:
    """`.kbuild-staging-old-<variant>-<pid>` -> <variant>; None for other names."""
    rest = name.removeprefix(STAGING_PREFIX)
    if rest == name or not rest.startswith(REPLACED):
        return None
    variant, _, pid = rest.removeprefix(REPLACED).rpartition("-")
    return variant if variant and pid.isdigit() else None


def _variant_dirs(base: Path) -> dict[str, Path]:
    """Variant name -> its folder in base; a variant whose install was cut off between its
    two renames is found under its replaced name while its own name is missing."""
    try:
        folders = sorted(entry for entry in base.iterdir() if entry.is_dir())
    except OSError:
        return {}
    found = {folder.name: folder for folder in folders if not folder.name.startswith(STAGING_PREFIX)}
    for folder in folders:
        variant = replaced_variant(folder.name)
        if variant is not None:
            found.setdefault(variant, folder)
    return found


def _no_match_message(path: Path, system: System, trace: list[Decision]) -> str:
    if not trace:
        example = system.variant_name or "torch-cpu"
        return (
            f"No build variants found in {path} or {path / 'build'} (expected folders named like "
            f"{example}, each holding metadata.json); build the kernel first (kbuild build)."
        )
    reasons = "; ".join(f"{d.name} was rejected: {d.reason}" for d in trace)
    return (
        f"No build variant in {path} can load on this machine ({system.describe()}). "
        f"Variants found: {reasons}. Build a variant for this machine (kbuild build), "
        "or pass backend='cpu' if the kernel has a CPU build."
    )


def _find(path: Path, system_for: Callable[[], System]) -> Path:
    if not path.exists():
        raise KernelLoadError(f"{path} does not exist; expected a kernel repo, its build/ folder or a variant folder")
    if not path.is_dir():
        raise KernelLoadError(f"{path} is not a folder; expected a kernel repo, its build/ folder or a variant folder")

    if (path / "metadata.json").exists():  # not is_file(): a planted FIFO gets read_metadata's error
        # A variant folder itself. When its name says what it was built for, hold it to
        # the same rules as a selected one rather than failing later in the import.
        variant = try_parse(path.name)
        if variant is None:
            return path
        system = system_for()
        decision = check_variant(variant, system)
        if not decision.accepted:
            raise KernelLoadError(
                f"The variant folder {path} cannot load on this machine ({system.describe()}): "
                f"{decision.reason}. Build or pick a variant for this machine."
            )
        return path

    system = system_for()
    trace: list[Decision] = []
    for base in (path, path / "build"):
        folders = _variant_dirs(base)
        best, decisions = select_variant(sorted(folders), system)
        if best is not None:
            return folders[best.name]
        trace += decisions
    raise KernelLoadError(_no_match_message(path, system, trace))


def find_variant(path: Path | str, backend: str | None = None, *, system: System | None = None) -> Path:
    """The variant folder `load_local` would load: `path` may be a kernel repo root (holding
    build/<variant>/), a build/ folder, or a variant folder (holding metadata.json). Pass
    `system` to select for another machine than this one."""
    return _find(Path(path), lambda: system if system is not None else detect_system(backend))


# -- metadata ------------------------------------------------------------------------
def read_json(file: Path, error: type[KernelLoadError], remedy: str, missing: str | None = None):
    """The JSON value in `file` (bounded: runtime/files.py), or `error` with one line ending in
    `remedy` (`missing` replaces the whole line when the file does not exist)."""
    try:
        return load_json_file(file)
    except FileNotFoundError:
        raise error(missing or f"cannot read {file}: it does not exist; {remedy}") from None
    except OSError as e:
        raise error(f"cannot read {file}: {e.strerror or e}; {remedy}") from None
    except JsonFileError as e:
        raise error(f"{e}; {remedy}") from None


def read_metadata(folder: Path | str) -> dict:
    """Read and check `folder/metadata.json`: every required key present with the right type."""
    file = Path(folder) / "metadata.json"
    metadata = read_json(file, KernelLoadError, "rebuild the kernel")
    if not isinstance(metadata, dict):
        raise KernelLoadError(f"{file} must hold a JSON object; rebuild the kernel")
    for key, types in REQUIRED_KEYS.items():
        if key not in metadata:
            raise KernelLoadError(f"{file} lacks the required key '{key}'; rebuild the kernel with a current kbuild")
        value = metadata[key]
        if not isinstance(value, types) or (int in types and isinstance(value, bool)):
            raise KernelLoadError(
                f"{file}: '{key}' must be {_JSON_TYPE[types[0]]}, got {type(value).__name__}; rebuild the kernel"
            )
    # Both end up in paths and module names: hold them to the formats kernels accepts.
    if not _KERNEL_NAME.fullmatch(metadata["name"]):
        raise KernelLoadError(
            f"{file}: 'name' must be a kernel name such as \"relu\" or \"flash-attn2\" (lowercase letters, digits "
            f"and dashes, starting with a letter), got {metadata['name']!r}; rebuild the kernel"
        )
    module_id = metadata["id"]
    if not module_id.isidentifier():
        raise KernelLoadError(f"{file}: 'id' must be a Python identifier such as _relu_cpu_1a2b3c4, got {module_id!r}")
    if not isinstance(metadata["backend"].get("type"), str):
        raise KernelLoadError(f"{file}: 'backend' must have a string 'type' such as \"cpu\" or \"cuda\"")
    if layout_of(metadata) not in LAYOUTS:
        raise KernelLoadError(
            f"{file}: 'build-layout' must be one of {', '.join(LAYOUTS)}, got {metadata['build-layout']!r}; "
            "upgrade kbuild or rebuild the kernel"
        )
    minver = metadata.get("kernels-minver")
    if minver is not None and not (isinstance(minver, str) and _KERNELS_MINVER.fullmatch(minver)):
        raise KernelLoadError(f"{file}: 'kernels-minver' must be a version such as \"0.19.1\", got {minver!r}")
    return metadata


# -- importing -----------------------------------------------------------------------
def _package(folder: Path, metadata: dict, verified: bool) -> VerifiedPackage:
    """Where the variant's package comes from, by its build layout; with `verified`, every
    byte imported is checked against the digest as it is read (runtime/verified_import.py)."""
    module_id = metadata["id"]
    digest = metadata["digest"]
    expected = digest.get("files") if verified else None
    algorithm = digest.get("algorithm", "sha256")
    try:
        if layout_of(metadata) == ZIP:
            archive = archive_path(folder, module_id)
            if not archive.is_file():
                raise KernelLoadError(f"{folder} has no {archive.name} (its build-layout is zip); rebuild the kernel")
            return VerifiedPackage(module_id, folder, expected, algorithm, archive=archive)
        package = VerifiedPackage(module_id, folder, expected, algorithm)
        if not package.has_file(INIT):
            # As in `kernels`: a variant may keep its package one level down, named after the kernel.
            nested = metadata["name"].replace("-", "_")
            if not package.has_file(f"{nested}/{INIT}"):
                raise KernelLoadError(f"{folder} has no __init__.py to import; rebuild the kernel")
            package.package_dir = nested
        return package
    except TamperedError as e:
        raise DigestMismatchError(str(e), path=folder, violations=[str(e)]) from None
    except (ImportError, zipfile.BadZipFile) as e:
        raise KernelLoadError(f"cannot import {folder}: {e}; rebuild the kernel") from None


def _same_origin(a: str | None, b: str) -> bool:
    """Whether two `__init__.py` paths are one file. A path inside an archive (zip layout)
    cannot be stat'ed: the folders (or archives) holding them are compared instead."""
    if not a or os.path.basename(a) != os.path.basename(b):
        return False
    try:
        return os.path.samefile(os.path.dirname(a), os.path.dirname(b))
    except OSError:
        return False


def _same_bytes(loaded: VerifiedPackage | None, package: VerifiedPackage) -> bool:
    """Whether two verified copies hold the same files with the same digests: the kernel id
    comes from what the build reads, so copies of one variant at two paths share it."""
    return (loaded is not None and loaded.expected is not None and package.expected is not None
            and loaded.algorithm == package.algorithm and loaded.expected == package.expected)


def _import(package: VerifiedPackage, metadata: dict, folder: Path) -> ModuleType:
    module_id = package.module_id
    spec = package.root_spec()
    if spec is None or spec.loader is None:
        raise KernelLoadError(f"cannot import {folder}: its package has no __init__.py; rebuild the kernel")
    existing = sys.modules.get(module_id)
    if existing is not None:
        if _same_origin(getattr(existing, "__file__", None), spec.origin):
            return existing  # loaded already, e.g. by kernels.get_local_kernel
        if _same_bytes(registered(module_id), package):
            return existing  # another copy of the same variant (a build folder, then the Hub's)
        raise KernelLoadError(
            f"Cannot load {folder}: a module named '{module_id}' is already imported from "
            f"{getattr(existing, '__file__', None) or 'elsewhere'}. Kernel ids must be unique in a "
            "process; rebuild one of the two so it gets its own id."
        )
    module = importlib.util.module_from_spec(spec)
    register(package)  # its submodules, too, come from checked source only
    sys.modules[module_id] = module  # before exec, so `from ._ops import ops` resolves
    try:
        spec.loader.exec_module(module)
    except BaseException as e:
        for name in [n for n in sys.modules if n == module_id or n.startswith(module_id + ".")]:
            del sys.modules[name]
        unregister(module_id)
        if isinstance(e, TamperedError):  # a file (its library, say) changed after the check
            raise DigestMismatchError(str(e), path=folder, violations=[str(e)]) from None
        e.add_note(f"while importing kernel '{metadata['name']}' (id {module_id}) from variant {folder}")
        raise
    return module


def load_local(
    path: Path | str,
    *,
    backend: str | None = None,
    verify: bool = True,
    signatures: SignaturePolicy | None = None,
) -> ModuleType:
    """Load the best variant of a local kernel build for this machine and return its module.

    `path` is a kernel repo root (holding build/<variant>/), a build/ folder or a variant
    folder. `backend` overrides the detected backend ("cpu" or torch's own backend). With
    `verify`, the folder's files are checked against metadata.json's digests first and
    nothing is imported when they differ. Loading one folder again returns the same module.
    With `signatures` (runtime/signatures.py), the variant's Sigstore signature is checked by
    that policy first, before metadata.json is even parsed.
    """
    with _lock:
        folder = _find(Path(path), lambda: detect_system(backend)).resolve()
        cached = _loaded.get(folder)
        if cached is not None:
            return cached
        refused = enforce(folder, signatures) if signatures is not None else None
        if refused:
            raise SignatureRefusedError(refused)
        metadata = read_metadata(folder)
        if verify:
            problems = verify_digest(folder, metadata)
            if problems:
                listed = "; ".join(problems[:_MAX_LISTED])
                more = f" and {len(problems) - _MAX_LISTED} more" if len(problems) > _MAX_LISTED else ""
                raise DigestMismatchError(
                    f"The files in {folder} do not match the digests in its metadata.json: {listed}{more}. "
                    "The build folder was modified or corrupted after it was built; rebuild it "
                    "(kbuild build) or download it again. Nothing was imported.",
                    path=folder,
                    violations=problems,
                )
        module = _import(_package(folder, metadata, verify), metadata, folder)
        record_loaded(metadata["id"], folder)  # so `kernels` can load the same build in this process
        _loaded[folder] = module
        return module
