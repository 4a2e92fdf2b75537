"""Parse and validate build.toml (kernel-builder editions: none, 5 and 6) into a typed Manifest.

A file without `edition` uses the edition-5 schema (most community repos have none). Edition 6
tags each `[kernel.<name>]` with `language` (cpp-cuda, ...) instead of `backend`; the parsed
KernelUnit carries the same `backend` either way.

Every error is a ManifestError whose one-line message names the file, the key and what
was expected, e.g.::

    examples/relu/build.toml: [kernel.relu_cpu] src: file 'relu_cpu/relu.cpp' does not exist

Unknown keys are errors, as in kernel-builder, whose schema this file shares.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kernel_builder.errors import ManifestError
from kernel_builder.kernel.toml_file import load_toml
from kernel_builder.variants import BACKENDS

EDITION = 5  # the schema of a file without `edition`
EDITIONS = (5, 6)
BUILD_LAYOUTS = ("files", "zip")
# At least 2 characters: kernels' KernelName refuses a one-letter name at load time.
KEBAB_CASE = re.compile(r"^(?=.{2})[a-z][a-z0-9]*(-[a-z0-9]+)*$")
UNIT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")
CAPABILITY = re.compile(r"^\d+\.\d+[a-z]?(\+PTX)?$")
ROCM_ARCH = re.compile(r"^gfx[0-9a-f]+([:][a-z+-]+)*$")
VERSION = re.compile(r"^\d+(\.\d+){0,2}$")

# The Python dependencies the kernels runtime knows how to satisfy (its python_depends.json).
PYTHON_DEPENDS = {
    None: {"einops", "helion", "tvm-ffi"},
    "cuda": {"nvidia-cutlass-dsl"},
    "xpu": {"onednn"},
}


@dataclass(frozen=True)
class KernelDependency:
    repo_id: str
    version: int


@dataclass(frozen=True)
class CudaGeneral:
    minver: str | None = None
    maxver: str | None = None
    python_depends: tuple[str, ...] = ()


@dataclass(frozen=True)
class Hub:
    repo_id: str | None = None
    branch: str | None = None


@dataclass(frozen=True)
class General:
    name: str
    backends: tuple[str, ...]
    version: int = 1
    edition: int = EDITION
    license: str | None = None
    upstream: str | None = None
    source: str | None = None
    python_depends: tuple[str, ...] = ()
    kernel_depends: tuple[KernelDependency, ...] = ()
    cuda: CudaGeneral | None = None
    xpu_python_depends: tuple[str, ...] = ()
    hub: Hub | None = None
    build_layout: str = "files"  # edition 6: "zip" packs the package into <variant>/<id>.zip

    @property
    def python_name(self) -> str:
        return self.name.replace("-", "_")


@dataclass(frozen=True)
class Torch:
    """`[torch]`: a compiled kernel with a torch-ext binding."""

    src: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    pyext: tuple[str, ...] = ("py", "pyi")
    minver: str | None = None
    maxver: str | None = None
    cxx_flags: tuple[str, ...] = ()
    # backend -> stable ABI version; "*" applies to every backend.
    stable_abi: dict[str, str] = field(default_factory=dict)

    def stable_abi_for(self, backend: str) -> str | None:
        return self.stable_abi.get(backend, self.stable_abi.get("*"))


@dataclass(frozen=True)
class TorchNoarch:
    """`[torch-noarch]`: pure Python / Triton, one `torch-<backend>` variant per backend."""

    pyext: tuple[str, ...] = ("py", "pyi")


@dataclass(frozen=True)
class KernelUnit:
    """One `[kernel.<name>]` compiled unit."""

    name: str
    backend: str
    src: tuple[str, ...]
    depends: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    cxx_flags: tuple[str, ...] = ()
    cuda_capabilities: tuple[str, ...] | None = None
    cuda_flags: tuple[str, ...] = ()
    cuda_minver: str | None = None
    rocm_archs: tuple[str, ...] | None = None
    hip_flags: tuple[str, ...] = ()
    sycl_flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Manifest:
    path: Path
    general: General
    torch: Torch | None
    noarch: TorchNoarch | None
    units: tuple[KernelUnit, ...]

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def name(self) -> str:
        return self.general.name

    @property
    def python_name(self) -> str:
        return self.general.python_name

    @property
    def package_dir(self) -> Path:
        """torch-ext/<python_name>/: the Python package copied into every variant."""
        return self.root / "torch-ext" / self.python_name

    def units_for(self, backend: str) -> tuple[KernelUnit, ...]:
        return tuple(u for u in self.units if u.backend == backend)


# -- a small typed reader: each key has a converter that raises _Expected -----------
class _Expected(Exception):
    """Raised by a converter: the text says what was expected."""


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise _Expected("a string")
    return value


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Expected("an integer")
    return value


def _str_list(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Expected("a list of strings")
    return tuple(value)


def _version(value: Any) -> str:
    if not isinstance(value, str) or not VERSION.match(value):
        raise _Expected("a version string such as \"2.13\"")
    return value


def _matching_list(pattern: re.Pattern, example: str) -> Callable[[Any], tuple[str, ...]]:
    def convert(value: Any) -> tuple[str, ...]:
        items = _str_list(value)
        bad = [v for v in items if not pattern.match(v)]
        if bad:
            raise _Expected(f"entries like {example}, not {bad[0]!r}")
        return items

    return convert


def _table(value: Any) -> dict:
    if not isinstance(value, dict):
        raise _Expected("a table")
    return value


class _Reader:
    """Reads one TOML table against a key -> converter spec, naming file and section."""

    def __init__(self, file: str, section: str, table: Any):
        self.file, self.section = file, section
        if not isinstance(table, dict):
            self.fail(None, "a table")
        self.table = table

    def fail(self, key: str | None, expected: str) -> None:
        where = f"[{self.section}]" + (f" {key}" if key else "")
        raise ManifestError(f"{self.file}: {where}: expected {expected}")

    def error(self, key: str | None, message: str) -> ManifestError:
        where = f"[{self.section}]" + (f" {key}" if key else "")
        return ManifestError(f"{self.file}: {where}: {message}")

    def read(self, spec: dict[str, Callable[[Any], Any]], required: tuple[str, ...] = ()) -> dict:
        unknown = sorted(set(self.table) - set(spec))
        if unknown:
            raise self.error(unknown[0], f"unknown key; allowed keys are {', '.join(sorted(spec))}")
        for key in required:
            if key not in self.table:
                raise self.error(key, "missing required key")
        out = {}
        for key, value in self.table.items():
            try:
                out[key.replace("-", "_")] = spec[key](value)
            except _Expected as e:
                raise self.error(key, f"expected {e}, got {_show(value)}") from None
        return out


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# -- sections -----------------------------------------------------------------------
def load_manifest(kernel_dir: Path | str) -> Manifest:
    """Read `<kernel_dir>/build.toml` (or a build.toml path) and validate it fully.

    The kernel repo is the folder holding the build.toml given, links in that folder's own
    path resolved; a build.toml that is a link must resolve inside that folder."""
    path = Path(kernel_dir)
    if path.is_dir() or not path.name.endswith(".toml"):
        path = path / "build.toml"
    file = display_path(path)
    if not path.is_file():
        raise ManifestError(f"{file}: not found; a kernel repo needs a build.toml at its root (see `kbuild init`)")
    root = path.absolute().parent.resolve()
    target = path.resolve()
    if not target.is_relative_to(root):
        raise ManifestError(
            f"{file}: a link to {target}, outside the kernel repo {root}; copy the file into the repo, "
            f"or build {target.parent} itself"
        )
    return _parse(root / path.name, file, load_toml(path, file))


def display_path(path: Path) -> str:
    """`path` as the user named it (links not followed), relative to the working folder when inside it."""
    absolute = Path(os.path.abspath(path))
    try:
        return str(absolute.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _parse(path: Path, file: str, data: dict) -> Manifest:
    unknown = sorted(set(data) - {"general", "torch", "torch-noarch", "kernel"})
    if "mlx-noarch" in unknown:
        raise ManifestError(f"{file}: [mlx-noarch]: kbuild does not build MLX kernels yet; use [torch] or [torch-noarch]")
    if unknown:
        raise ManifestError(
            f"{file}: [{unknown[0]}]: unknown section; allowed are [general], [torch], [torch-noarch], [kernel.<name>]"
        )
    if "general" not in data:
        raise ManifestError(f"{file}: [general]: missing required section")
    general = _general(file, data["general"])
    if ("torch" in data) == ("torch-noarch" in data):
        raise ManifestError(f"{file}: [torch]: expected exactly one of [torch] or [torch-noarch]")
    torch = _torch(file, data["torch"]) if "torch" in data else None
    noarch = _noarch(file, data["torch-noarch"]) if "torch-noarch" in data else None
    kernels = data.get("kernel", {})
    if not isinstance(kernels, dict):
        raise ManifestError(f"{file}: [kernel]: expected tables [kernel.<name>]")
    units = tuple(_unit(file, name, table, general) for name, table in kernels.items())
    if noarch is not None and units:
        raise ManifestError(f"{file}: [kernel.{units[0].name}]: [torch-noarch] kernels are pure Python; remove the compiled units or use [torch]")
    manifest = Manifest(path=path, general=general, torch=torch, noarch=noarch, units=units)
    _check_files(file, manifest)
    return manifest


def _python_depends(backend: str | None) -> Callable[[Any], tuple[str, ...]]:
    allowed = PYTHON_DEPENDS[None] | PYTHON_DEPENDS.get(backend, set())

    def convert(value: Any) -> tuple[str, ...]:
        items = _str_list(value)
        bad = [v for v in items if v not in allowed]
        if bad:
            raise _Expected(f"allow-listed names ({', '.join(sorted(allowed))}), not {bad[0]!r}")
        return items

    return convert


def _kernel_depends(value: Any) -> tuple[KernelDependency, ...]:
    if not isinstance(value, list):
        raise _Expected('a list of {repo-id = "org/name", version = N}')
    deps = []
    for item in value:
        if (
            not isinstance(item, dict)
            or set(item) != {"repo-id", "version"}
            or not isinstance(item["repo-id"], str)
            or "/" not in item["repo-id"]
            or isinstance(item["version"], bool)
            or not isinstance(item["version"], int)
        ):
            raise _Expected('a list of {repo-id = "org/name", version = N}')
        deps.append(KernelDependency(item["repo-id"], item["version"]))
    return tuple(deps)


def _general(file: str, table: Any) -> General:
    reader = _Reader(file, "general", table)
    values = reader.read(
        {
            "name": _str,
            "version": _int,
            "edition": _int,
            "license": _str,
            "backends": _str_list,
            "upstream": _str,
            "source": _str,
            "build-layout": _str,
            "python-depends": _python_depends(None),
            "kernel-depends": _kernel_depends,
            "cuda": _table,
            "xpu": _table,
            "hub": _table,
        },
        required=("name", "backends"),
    )
    if not KEBAB_CASE.match(values["name"]):
        raise reader.error("name", f"expected a kebab-case name of 2 or more characters such as \"my-kernel\", got {values['name']!r}")
    if values.get("edition", EDITION) not in EDITIONS:
        raise reader.error(
            "edition", f"expected 5 or 6, or no edition key (kbuild reads those), got {values['edition']}"
        )
    if "build_layout" in values:
        if values.get("edition", EDITION) < 6:
            raise reader.error("build-layout", "only valid in edition 6; run `kbuild migrate` or remove it")
        if values["build_layout"] not in BUILD_LAYOUTS:
            raise reader.error("build-layout", f"expected one of {', '.join(BUILD_LAYOUTS)}, got {values['build_layout']!r}")
    unknown = [b for b in values["backends"] if b not in BACKENDS]
    if unknown:
        raise reader.error("backends", f"unknown backend {unknown[0]!r}; expected some of {', '.join(BACKENDS)}")
    if not values["backends"]:
        raise reader.error("backends", f"expected at least one of {', '.join(BACKENDS)}")
    if "cuda" in values:
        cuda = _Reader(file, "general.cuda", values["cuda"]).read(
            {"minver": _version, "maxver": _version, "python-depends": _python_depends("cuda")}
        )
        values["cuda"] = CudaGeneral(**cuda)
    if "xpu" in values:
        xpu = _Reader(file, "general.xpu", values.pop("xpu")).read({"python-depends": _python_depends("xpu")})
        values["xpu_python_depends"] = xpu.get("python_depends", ())
    if "hub" in values:
        hub = _Reader(file, "general.hub", values["hub"]).read({"repo-id": _str, "branch": _str})
        if "repo_id" in hub and hub["repo_id"].count("/") != 1:
            raise ManifestError(f"{file}: [general.hub] repo-id: expected \"org/name\", got {hub['repo_id']!r}")
        values["hub"] = Hub(**hub)
    return General(**values)


def _stable_abi(value: Any) -> dict[str, str]:
    if isinstance(value, str):
        return {"*": _version(value)}
    if isinstance(value, dict):
        bad = [k for k in value if k not in BACKENDS]
        if bad:
            raise _Expected(f"backend keys ({', '.join(BACKENDS)}), not {bad[0]!r}")
        return {k: _version(v) for k, v in value.items()}
    raise _Expected('a version such as "2.10" or a table such as {cuda = "2.10"}')


def _torch(file: str, table: Any) -> Torch:
    values = _Reader(file, "torch", table).read(
        {
            "src": _str_list,
            "include": _str_list,
            "pyext": _str_list,
            "minver": _version,
            "maxver": _version,
            "cxx-flags": _str_list,
            "stable-abi": _stable_abi,
        }
    )
    return Torch(**values)


def _noarch(file: str, table: Any) -> TorchNoarch:
    return TorchNoarch(**_Reader(file, "torch-noarch", table).read({"pyext": _str_list}))


_COMMON_UNIT_KEYS: dict[str, Callable[[Any], Any]] = {
    "depends": _str_list,
    "src": _str_list,
    "include": _str_list,
    "cxx-flags": _str_list,
}
_BACKEND_UNIT_KEYS: dict[str, dict[str, Callable[[Any], Any]]] = {
    "cpu": {},
    "metal": {},
    "cuda": {
        "cuda-capabilities": _matching_list(CAPABILITY, '"8.0" or "9.0a"'),
        "cuda-flags": _str_list,
        "cuda-minver": _version,
    },
    "rocm": {"rocm-archs": _matching_list(ROCM_ARCH, '"gfx90a"'), "hip-flags": _str_list},
    "xpu": {"sycl-flags": _str_list},
}


# Edition 6 names the unit's language; each C++ language builds for one backend.
_CPP_LANGUAGE = {backend: f"cpp-{backend}" for backend in BACKENDS}
_RUST_LANGUAGES = ("rust-cpu", "rust-cuda-oxide", "rust-cutile")


def _unit(file: str, name: str, table: Any, general: General) -> KernelUnit:
    section = f"kernel.{name}"
    if not UNIT_NAME.match(name):
        raise ManifestError(
            f"{file}: [{section}]: expected a unit name of letters, digits, '_' or '-' (not starting with '-')"
        )
    reader = _Reader(file, section, table)
    backend = _unit_backend(reader, general)
    tag_key = "language" if general.edition >= 6 else "backend"
    spec = {tag_key: _str, **_COMMON_UNIT_KEYS, **_BACKEND_UNIT_KEYS[backend]}
    other_backend_keys = {k for b, keys in _BACKEND_UNIT_KEYS.items() if b != backend for k in keys}
    misplaced = sorted(set(reader.table) & (other_backend_keys - set(spec)))
    if misplaced:
        owner = next(b for b, keys in _BACKEND_UNIT_KEYS.items() if misplaced[0] in keys)
        tag = f'language = "{_CPP_LANGUAGE[owner]}"' if tag_key == "language" else f'backend = "{owner}"'
        raise reader.error(misplaced[0], f"only valid for {tag}, this unit is \"{reader.table[tag_key]}\"")
    values = reader.read(spec, required=("src",))
    values.pop(tag_key)
    if not values["src"]:
        raise reader.error("src", "expected at least one source file")
    return KernelUnit(name=name, backend=backend, **values)


def _unit_backend(reader: _Reader, general: General) -> str:
    """The backend a unit builds for: `backend` (editions none/5) or `language` (edition 6)."""
    table = reader.table
    if general.edition >= 6:
        if "backend" in table:
            raise reader.error("backend", 'edition 6 uses `language` (e.g. language = "cpp-cuda"), not `backend`')
        if "language" not in table:
            raise reader.error("language", f"missing required key; expected one of {', '.join(_CPP_LANGUAGE.values())}")
        language = table["language"]
        if language in _RUST_LANGUAGES:
            raise reader.error("language", f"{language!r}: kbuild does not build Rust units; only cpp-* languages are supported")
        backend = next((b for b, lang in _CPP_LANGUAGE.items() if lang == language), None)
        if backend is None:
            raise reader.error(
                "language", f"unknown language {language!r}; expected one of {', '.join(_CPP_LANGUAGE.values())}"
            )
    else:
        if "language" in table:
            raise reader.error(
                "language", "`language` is edition 6; this file is edition 5 or has none, which uses `backend` (or run `kbuild migrate`)"
            )
        if "backend" not in table:
            raise reader.error("backend", f"missing required key; expected one of {', '.join(BACKENDS)}")
        backend = table["backend"]
        if backend not in BACKENDS:
            raise reader.error("backend", f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    if backend not in general.backends:
        raise reader.error(
            "language" if general.edition >= 6 else "backend",
            f"backend {backend!r} is not in [general] backends ({', '.join(general.backends)}); add it there or remove this unit",
        )
    return backend


def _check_files(file: str, manifest: Manifest) -> None:
    """Every listed source and include folder must exist inside the kernel repo (links
    followed), and the Python package too; kernel_builder.kernel.sources checks what lies in them."""
    root = manifest.root
    checks: list[tuple[str, str, tuple[str, ...], bool]] = []
    if manifest.torch is not None:
        checks.append(("torch", "src", manifest.torch.src, False))
        checks.append(("torch", "include", manifest.torch.include, True))
    for unit in manifest.units:
        checks.append((f"kernel.{unit.name}", "src", unit.src, False))
        checks.append((f"kernel.{unit.name}", "include", unit.include, True))
    for section, key, paths, is_dir in checks:
        for rel in paths:
            _check_inside(file, f"[{section}] {key}", root, rel)
            target = root / rel
            ok = target.is_dir() if is_dir else target.is_file()
            if not ok:
                what = "folder" if is_dir else "file"
                raise ManifestError(f"{file}: [{section}] {key}: {what} '{rel}' does not exist")
    package = manifest.package_dir.relative_to(root).as_posix()
    _check_inside(file, "[general] name", root, package)
    init = manifest.package_dir / "__init__.py"
    if not init.is_file():
        raise ManifestError(
            f"{file}: [general] name: expected the Python package at "
            f"torch-ext/{manifest.python_name}/__init__.py for kernel '{manifest.name}'"
        )


def _check_inside(file: str, where: str, root: Path, rel: str) -> None:
    """A path build.toml names is relative and resolves, links followed, inside the repo:
    a build reads nothing from outside it (nothing is walked or compiled before this)."""
    if Path(rel).is_absolute():
        raise ManifestError(f"{file}: {where}: '{rel}' is an absolute path; name a path inside the kernel repo, relative to it")
    try:
        target = (root / rel).resolve()
    except (OSError, RuntimeError):  # Python 3.11 raises RuntimeError for a link loop
        raise ManifestError(f"{file}: {where}: '{rel}' is a link loop") from None
    if not target.is_relative_to(root):
        how = "is a link to" if target != Path(os.path.normpath(root / rel)) else "resolves to"
        raise ManifestError(
            f"{file}: {where}: '{rel}' {how} {target}, outside the kernel repo {root}; a build reads only files inside its repo"
        )
