"""Parse and validate build.toml (kernel-builder editions: none, 5 and 6) into a typed Manifest.

A file without `edition` uses the edition-5 schema (most community repos have none). Edition 6
tags each `[kernel.<name>]` with `language` (cpp-cuda, ...) instead of `backend`; the parsed
KernelUnit carries the same `backend` either way.

Every error is a ManifestError whose one-line message names the file, the key and what
was expected, e.g.::

    examples/relu/build.toml: [kernel.relu_cpu] src: file 'relu_cpu/relu.cpp' does not exist

Unknown keys are errors, as in kernel-builder, whose schema this file shares. The verdict
(accept / refuse) is kernels 0.19.1's own parser's (`kernels._rust.Build.open`), checked by
tests/kernel/test_parser_oracle.py; where kbuild refuses more, the test lists why.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kernel_builder.backend_facts import ALL as ALL_FACTS, FACTS
from kernel_builder.errors import ManifestError
from kernel_builder.kernel.toml_file import load_toml
from kernel_builder.variants import BACKENDS, NOARCH_BACKENDS, Kind, Variant, parse_version

EDITION = 5  # the schema of a file without `edition` (kernels calls it "legacy v4"), as edition 5 lays it out
EDITIONS = (5, 6)
ALL_BACKENDS = tuple(sorted(BACKENDS + NOARCH_BACKENDS))
# The `depends` kernels 0.19.1 knows (its Dependency enum); anything else is refused before a compile.
KNOWN_DEPENDS = (
    "cutlass_2_10", "cutlass_3_5", "cutlass_3_6", "cutlass_3_8", "cutlass_3_9", "cutlass_4_0", "cutlass_4_4",
    "cutlass_4_5", "metal-cpp", "sycl_tla", "torch", "torch-stable-abi-shim",
)
# Frameworks outside torch: parsed into Manifest.other. `kbuild build` builds [tvm-ffi]
# (kernel_builder.pipeline.build_tvm_ffi); every other command, and [mlx-noarch] always, refuse in one line.
UNBUILT_FRAMEWORKS = ("tvm-ffi", "mlx-noarch")
MIN_TILEIRAS = "13.2"  # rust-cutile: the first CUDA release with cuTile
_GIT_SCHEMES = ("https", "http", "git", "ssh", "git+ssh", "git+https", "git+http")
BUILD_LAYOUTS = ("files", "zip")
# At least 2 characters: kernels' KernelName refuses a one-letter name at load time.
KEBAB_CASE = re.compile(r"^(?=.{2})[a-z][a-z0-9]*(-[a-z0-9]+)*$")  # what `kbuild init` makes
KERNEL_NAME = re.compile(r"^[a-z][-a-z0-9]*[a-z0-9]$")  # what kernels' KernelName accepts
UNIT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")
CAPABILITY = re.compile(r"^\d+\.\d+[a-z]?(\+PTX)?$")
ROCM_ARCH = re.compile(r"^gfx[0-9a-f]+([:][a-z+-]+)*$")
VERSION = re.compile(r"^\d+\.\d+$")  # kernels' Version<2>: exactly major.minor

# The Python dependencies the kernels runtime knows how to satisfy (its python_depends.json):
# these for every backend, a backend's own from its record in backend_facts.
PYTHON_DEPENDS = {
    None: {"einops", "helion", "tvm-ffi"},
    **{f.name: set(f.python_depends) for f in ALL_FACTS if f.python_depends},
}
# The backends with a [general.<backend>] table.
GENERAL_TABLES = tuple(f.name for f in ALL_FACTS if f.general_table)


@dataclass(frozen=True)
class KernelDependency:
    """Another Hub kernel this one needs: a major `version` (branch vN) or a pinned `revision`."""

    repo_id: str
    version: int | None = None
    revision: str | None = None

    def as_json(self) -> dict:
        """The metadata.json / build.toml spelling."""
        pin = {"version": self.version} if self.revision is None else {"revision": self.revision}
        return {"repo-id": self.repo_id, **pin}


@dataclass(frozen=True)
class CudaGeneral:
    minver: str | None = None
    maxver: str | None = None
    python_depends: tuple[str, ...] = ()
    kernel_depends: tuple[KernelDependency, ...] = ()


@dataclass(frozen=True)
class BackendGeneral:
    """`[general.<backend>]` of the other backends (xpu, neuron, tpu)."""

    python_depends: tuple[str, ...] = ()
    kernel_depends: tuple[KernelDependency, ...] = ()


@dataclass(frozen=True)
class Hub:
    repo_id: str | None = None
    branch: str | None = None


@dataclass(frozen=True)
class General:
    name: str
    backends: tuple[str, ...]
    version: int
    license: str
    edition: int = EDITION
    upstream: str | None = None
    source: str | None = None
    python_depends: tuple[str, ...] = ()
    kernel_depends: tuple[KernelDependency, ...] = ()
    cuda: CudaGeneral | None = None
    xpu: BackendGeneral | None = None
    neuron: BackendGeneral | None = None
    tpu: BackendGeneral | None = None
    hub: Hub | None = None
    build_layout: str = "files"  # edition 6: "zip" packs the package into <variant>/<id>.zip

    @property
    def python_name(self) -> str:
        return self.name.replace("-", "_")

    def backend_table(self, backend: str) -> CudaGeneral | BackendGeneral | None:
        """`[general.<backend>]`, None where the file has none."""
        return getattr(self, backend, None) if backend in GENERAL_TABLES else None

    def all_python_depends(self, backend: str) -> tuple[str, ...]:
        """`python-depends` of [general] and of [general.<backend>]."""
        table = self.backend_table(backend)
        return self.python_depends + (table.python_depends if table else ())

    def all_kernel_depends(self, backend: str) -> tuple[KernelDependency, ...]:
        """`kernel-depends` of [general] and of [general.<backend>], as kernels' Build.all_kernel_depends."""
        table = self.backend_table(backend)
        return self.kernel_depends + (table.kernel_depends if table else ())


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
    """`[torch-noarch]`: pure Python / Triton, one `torch-<backend>` variant per backend.
    `cuda_capabilities` / `rocm_archs` (kernels#668, snake case as kernels' parser reads them)
    are written into the cuda / rocm variant's metadata; without them the variant has no arch list."""

    pyext: tuple[str, ...] = ("py", "pyi")
    cuda_capabilities: tuple[str, ...] | None = None
    rocm_archs: tuple[str, ...] | None = None

    def archs_for(self, backend: str) -> tuple[str, ...] | None:
        key = FACTS[backend].noarch_arch_key if backend in FACTS else None
        return getattr(self, key) if key else None


@dataclass(frozen=True)
class OtherFramework:
    """A framework kbuild reads but does not build yet ([tvm-ffi], [mlx-noarch])."""

    name: str
    src: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    cxx_flags: tuple[str, ...] = ()  # [tvm-ffi] cxx-flags: the binding sources' flags only
    pyext: tuple[str, ...] = ("py",)  # the package files a variant ships (kernel-builder: py always, plus these)


@dataclass(frozen=True)
class KernelUnit:
    """One `[kernel.<name>]` compiled unit. `language` is edition 6's tag (cpp-cuda, rust-cpu, ...);
    older editions' `backend = "cuda"` reads as cpp-cuda."""

    name: str
    backend: str
    src: tuple[str, ...]
    language: str = ""
    depends: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    cxx_flags: tuple[str, ...] = ()
    cuda_capabilities: tuple[str, ...] | None = None
    cuda_flags: tuple[str, ...] = ()
    cuda_minver: str | None = None
    rocm_archs: tuple[str, ...] | None = None
    hip_flags: tuple[str, ...] = ()
    sycl_flags: tuple[str, ...] = ()
    cargo_manifest: str | None = None
    tileiras_minver: str | None = None


@dataclass(frozen=True)
class Manifest:
    path: Path
    general: General
    torch: Torch | None
    noarch: TorchNoarch | None
    units: tuple[KernelUnit, ...]
    other: OtherFramework | None = None  # [tvm-ffi] or [mlx-noarch]: parsed, refused by `kbuild build`

    @property
    def framework(self) -> str:
        if self.other is not None:
            return self.other.name
        return "torch" if self.torch is not None else "torch-noarch"

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
        """torch-ext/<python_name>/ (tvm-ffi-ext/ under [tvm-ffi]): the Python package copied into every variant."""
        ext = "tvm-ffi-ext" if self.framework == "tvm-ffi" else "torch-ext"
        return self.root / ext / self.python_name

    def require_buildable(self) -> None:
        """Refuse, in one line, a kernel the torch pipeline cannot plan ([tvm-ffi], [mlx-noarch])."""
        if self.other is not None:
            what = ("only `kbuild build` builds this framework so far" if self.other.name == "tvm-ffi"
                    else "kbuild reads this framework but does not build it yet")
            raise ManifestError(
                f"{display_path(self.path)}: [{self.other.name}]: {what}; kernel-builder (huggingface/kernels) builds it"
            )

    # -- what the kernel admits ---------------------------------------------------------
    def admits(self, variant: Variant) -> str | None:
        """Why this kernel rules `variant` out whatever the machine ([general] backends, its
        framework, `[torch] stable-abi`), or None. Its torch and toolkit bounds are asked apart
        (`torch_reason`, `toolkit_reason`): they also judge the environments a build uses."""
        if variant.backend not in self.general.backends:
            return f"kernel '{self.name}' does not list backend '{variant.backend}' in [general] backends"
        if (variant.kind is Kind.NOARCH) != (self.noarch is not None):
            if self.noarch is not None:
                return "[torch-noarch] kernels build torch-<backend> variants"
            return "[torch] kernels build per-torch variants"
        return self._stable_abi_reason(variant)

    def _stable_abi_reason(self, variant: Variant) -> str | None:
        """Why `[torch] stable-abi` rules out this kind of variant for its backend, or None."""
        if self.torch is None or variant.kind is Kind.NOARCH:
            return None
        abi = self.stable_abi(variant.backend)
        if abi is None:
            if variant.kind is Kind.STABLE_ABI:
                return f"[torch] stable-abi does not name {variant.backend}, so it builds one variant per torch release"
            return None
        tag = f"torch-stable-abi{abi[0]}{abi[1]}"
        if variant.kind is not Kind.STABLE_ABI or variant.torch != abi:
            return f"[torch] stable-abi builds {variant.backend} once, as {tag}-{variant.compute}-{variant.platform}"
        return None

    def stable_abi(self, backend: str) -> tuple[int, int] | None:
        """The stable ABI version `[torch] stable-abi` names for this backend, or None."""
        abi = self.torch.stable_abi_for(backend) if self.torch else None
        return parse_version(abi) if abi else None

    def admits_torch(self, torch: tuple[int, int] | None) -> bool:
        """Whether `[torch] minver/maxver` admit this torch version."""
        return self.torch_reason(torch) is None

    def torch_reason(self, torch: tuple[int, int] | None) -> str | None:
        """Why `[torch] minver/maxver` excludes this torch version, or None."""
        bounds = self.torch
        if bounds is None or torch is None:
            return None
        text = f"{torch[0]}.{torch[1]}"
        if bounds.minver and torch < parse_version(bounds.minver):
            return f"[torch] minver {bounds.minver} excludes torch {text}"
        if bounds.maxver and torch > parse_version(bounds.maxver):
            return f"[torch] maxver {bounds.maxver} excludes torch {text}"
        return None

    def toolkit_reason(self, backend: str, version: tuple[int, int] | None) -> str | None:
        """Why `[general.<backend>] minver/maxver` excludes this toolkit version, or None."""
        bounds = self.general.backend_table(backend)
        minver, maxver = getattr(bounds, "minver", None), getattr(bounds, "maxver", None)
        if version is None or not (minver or maxver):
            return None
        text = FACTS[backend].label(version) if backend in FACTS else f"{backend} {version[0]}.{version[1]}"
        if minver and version < parse_version(minver):
            return f"[general.{backend}] minver {minver} excludes {text}"
        if maxver and version > parse_version(maxver):
            return f"[general.{backend}] maxver {maxver} excludes {text}"
        return None

    def units_for(self, backend: str) -> tuple[KernelUnit, ...]:
        """The units a build for `backend` compiles; a unit of a backend missing from
        [general] backends is never built (kernel-builder ignores it too)."""
        return tuple(u for u in self.units if u.backend == backend and backend in self.general.backends)


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


_FRAMEWORKS = {5: ("torch", "torch-noarch", "tvm-ffi"), 6: ("torch", "torch-noarch", "tvm-ffi", "mlx-noarch")}


def _parse(path: Path, file: str, data: dict) -> Manifest:
    edition = _edition(file, data.get("general"))
    frameworks = _FRAMEWORKS[edition]
    unknown = sorted(set(data) - {"general", "kernel", *frameworks})
    if unknown:
        allowed = ", ".join(f"[{s}]" for s in ("general", *frameworks, "kernel.<name>"))
        hint = " ([mlx-noarch] is edition 6)" if unknown[0] == "mlx-noarch" else ""
        raise ManifestError(f"{file}: [{unknown[0]}]: unknown section{hint}; allowed are {allowed}")
    if "general" not in data:
        raise ManifestError(f"{file}: [general]: missing required section")
    general = _general(file, data["general"], edition)
    present = [f for f in frameworks if f in data]
    if len(present) != 1:
        where = present[1] if present else "torch"
        raise ManifestError(f"{file}: [{where}]: expected exactly one framework section, one of {', '.join(f'[{f}]' for f in frameworks)}")
    framework = present[0]
    declared = "edition" in data["general"]  # an edition-less file is kernels' "legacy v4" schema
    torch = _torch(file, data["torch"], declared) if framework == "torch" else None
    noarch = _noarch(file, data["torch-noarch"]) if framework == "torch-noarch" else None
    other = _other_framework(file, framework, data[framework], general) if framework in UNBUILT_FRAMEWORKS else None
    kernels = data.get("kernel", {})
    if not isinstance(kernels, dict):
        raise ManifestError(f"{file}: [kernel]: expected tables [kernel.<name>]")
    units = tuple(_unit(file, name, table, general, framework) for name, table in kernels.items())
    if noarch is not None and units:
        raise ManifestError(f"{file}: [kernel.{units[0].name}]: [torch-noarch] kernels are pure Python; remove the compiled units or use [torch]")
    if torch is not None:
        noarch_only = [b for b in general.backends if b in NOARCH_BACKENDS]
        if noarch_only:
            raise ManifestError(
                f"{file}: [general] backends: '{noarch_only[0]}' kernels are Python (nothing compiles for it); "
                "declare [torch-noarch] instead of [torch]"
            )
    manifest = Manifest(path=path, general=general, torch=torch, noarch=noarch, units=units, other=other)
    _check_files(file, manifest)
    return manifest


def _edition(file: str, general: Any) -> int:
    edition = general.get("edition", EDITION) if isinstance(general, dict) else EDITION
    if isinstance(edition, bool) or edition not in EDITIONS:
        raise ManifestError(f"{file}: [general] edition: expected 5 or 6, or no edition key, got {_show(edition)}")
    return edition


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Expected("a whole number (0 or more)")
    return value


def _git_url(value: Any) -> str:
    """A git repository URL as kernels reads one: a URL with a git scheme, or scp-like `host:path`."""
    text = _str(value)
    scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):", text)
    if scheme:
        ok = scheme.group(1).lower() in _GIT_SCHEMES and re.match(r"^[^:]+://[^/\s]+", text) and not re.search(r"\s", text)
    else:
        host, _, rest = text.partition(":")
        ok = host and rest and not rest.startswith("/") and not re.search(r"\s", text)
    if not ok:
        raise _Expected(f"a git URL such as \"https://github.com/org/repo\" (schemes {', '.join(_GIT_SCHEMES)}) or \"git@host:org/repo.git\"")
    return text


def _python_depends(backend: str | None) -> Callable[[Any], tuple[str, ...]]:
    allowed = PYTHON_DEPENDS[None] | PYTHON_DEPENDS.get(backend, set())

    def convert(value: Any) -> tuple[str, ...]:
        items = _str_list(value)
        bad = [v for v in items if v not in allowed]
        if bad:
            raise _Expected(f"allow-listed names ({', '.join(sorted(allowed))}), not {bad[0]!r}")
        return items

    return convert


_KERNEL_DEPENDS_SHAPE = 'a list of {repo-id = "org/name", version = N} or {repo-id = "org/name", revision = "..."}'


def _kernel_depends(value: Any) -> tuple[KernelDependency, ...]:
    if not isinstance(value, list):
        raise _Expected(_KERNEL_DEPENDS_SHAPE)
    deps = []
    for item in value:
        if not isinstance(item, dict) or set(item) - {"repo-id", "version", "revision"} or not isinstance(item.get("repo-id"), str):
            raise _Expected(_KERNEL_DEPENDS_SHAPE)
        if ("version" in item) == ("revision" in item):
            raise _Expected(f"exactly one of version or revision in {_show(item)}")
        try:
            version = _count(item["version"]) if "version" in item else None
            revision = _str(item["revision"]) if "revision" in item else None
        except _Expected:
            raise _Expected(_KERNEL_DEPENDS_SHAPE) from None
        deps.append(KernelDependency(item["repo-id"], version, revision))
    return tuple(deps)


def _general(file: str, table: Any, edition: int) -> General:
    reader = _Reader(file, "general", table)
    spec: dict[str, Callable[[Any], Any]] = {
        "name": _str,
        "version": _count,
        "license": _str,
        "backends": _str_list,
        "upstream": _git_url,
        "source": _git_url,
        "python-depends": _python_depends(None),
        "cuda": _table,
        "xpu": _table,
        "neuron": _table,
        "hub": _table,
    }
    if "edition" in reader.table:  # editions 5 and 6 (an edition-less file is kernels' "legacy v4")
        spec.update({"edition": _int, "kernel-depends": _kernel_depends, "tpu": _table})
    if edition >= 6:
        spec["build-layout"] = _str
    if "build-layout" in reader.table and edition < 6:
        raise reader.error("build-layout", "only valid in edition 6; run `kbuild migrate` or remove it")
    for key, example in (("version", "the kernel's major version, e.g. version = 1"), ("license", 'an SPDX id, e.g. license = "apache-2.0"')):
        if key not in reader.table:
            raise reader.error(key, f"missing required key ({example}); kernels refuses a build.toml without it")
    values = reader.read(spec, required=("name", "backends"))
    if not KERNEL_NAME.match(values["name"]):
        raise reader.error(
            "name", f"expected a kebab-case name of 2 or more characters (a-z, 0-9 and '-', starting with a letter) such as \"my-kernel\", got {values['name']!r}"
        )
    if values.get("build_layout", "files") not in BUILD_LAYOUTS:
        raise reader.error("build-layout", f"expected one of {', '.join(BUILD_LAYOUTS)}, got {values['build_layout']!r}")
    unknown = [b for b in values["backends"] if b not in ALL_BACKENDS]
    if unknown:
        raise reader.error("backends", f"unknown backend {unknown[0]!r}; expected some of {', '.join(ALL_BACKENDS)}")
    if not values["backends"]:
        raise reader.error("backends", f"expected at least one of {', '.join(ALL_BACKENDS)}")
    values["edition"] = edition
    kernel_depends = {"kernel-depends": _kernel_depends} if "edition" in reader.table else {}
    if "cuda" in values:
        cuda = _Reader(file, "general.cuda", values["cuda"]).read(
            {"minver": _version, "maxver": _version, "python-depends": _python_depends("cuda"), **kernel_depends}
        )
        values["cuda"] = CudaGeneral(**cuda)
    for backend, keys in (("xpu", kernel_depends), ("neuron", kernel_depends), ("tpu", {})):
        if backend in values:
            spec = {"python-depends": _python_depends(backend), **keys}
            values[backend] = BackendGeneral(**_Reader(file, f"general.{backend}", values[backend]).read(spec))
    if "hub" in values:
        # `kbuild publish` checks repo-id by the Hub's rule when it uses it, as kernel-builder's upload.
        values["hub"] = Hub(**_Reader(file, "general.hub", values["hub"]).read({"repo-id": _str, "branch": _str}))
    return General(**values)


def _stable_abi(value: Any) -> dict[str, str]:
    if isinstance(value, str):
        return {"*": _version(value)}
    if isinstance(value, dict):
        bad = [k for k in value if k not in ALL_BACKENDS]
        if bad:
            raise _Expected(f"backend keys ({', '.join(ALL_BACKENDS)}), not {bad[0]!r}")
        return {k: _version(v) for k, v in value.items()}
    raise _Expected('a version such as "2.10" or a table such as {cuda = "2.10"}')


def _stable_abi_version(value: Any) -> dict[str, str]:
    if not isinstance(value, str):
        raise _Expected('a version such as "2.10" (a per-backend table needs edition 5 or 6)')
    return {"*": _version(value)}


def _torch(file: str, table: Any, declared: bool) -> Torch:
    reader = _Reader(file, "torch", table)
    values = reader.read(
        {
            "src": _str_list,
            "include": _str_list,
            "pyext": _str_list,
            "minver": _version,
            "maxver": _version,
            "cxx-flags": _str_list,
            "stable-abi": _stable_abi if declared else _stable_abi_version,
        }
    )
    return Torch(**values)


def _noarch(file: str, table: Any) -> TorchNoarch:
    reader = _Reader(file, "torch-noarch", table)
    for kebab in ("cuda-capabilities", "rocm-archs"):
        if kebab in reader.table:
            raise reader.error(kebab, f"unknown key; kernels reads it as `{kebab.replace('-', '_')}` (snake case) here")
    values = reader.read({
        "pyext": _str_list,
        "cuda_capabilities": _matching_list(CAPABILITY, '"8.0" or "9.0a"'),
        "rocm_archs": _matching_list(ROCM_ARCH, '"gfx90a"'),
    })
    return TorchNoarch(**values)


def _other_framework(file: str, name: str, table: Any, general: General) -> OtherFramework:
    reader = _Reader(file, name, table)
    if name == "mlx-noarch":
        reader.read({"pyext": _str_list})
        others = [b for b in general.backends if b != "metal"]
        if others:
            raise ManifestError(f"{file}: [general] backends: [mlx-noarch] supports only the metal backend, not {others[0]!r}")
        return OtherFramework(name)
    spec = {"src": _str_list, "include": _str_list, "pyext": _str_list, "cxx-flags": _str_list}
    values = reader.read(spec, required=() if general.edition >= 6 else ("src",))
    pyext = tuple(dict.fromkeys(("py",) + values.get("pyext", ())))
    return OtherFramework(name, values.get("src", ()), values.get("include", ()), values.get("cxx_flags", ()), pyext)


_CPP_UNIT_KEYS: dict[str, Callable[[Any], Any]] = {
    "depends": _str_list,
    "src": _str_list,
    "include": _str_list,
    "cxx-flags": _str_list,
}
_CAPABILITIES = _matching_list(CAPABILITY, '"8.0" or "9.0a"')
_BACKEND_UNIT_KEYS: dict[str, dict[str, Callable[[Any], Any]]] = {
    "cpu": {},
    "metal": {},
    "cuda": {"cuda-capabilities": _CAPABILITIES, "cuda-flags": _str_list, "cuda-minver": _version},
    "rocm": {"rocm-archs": _matching_list(ROCM_ARCH, '"gfx90a"'), "hip-flags": _str_list},
    "xpu": {"sycl-flags": _str_list},
}
# Edition 6 names the unit's language: each C++ language builds for one backend; Rust units
# (built only under [tvm-ffi]) name a Cargo.toml.
_CPP_LANGUAGE = {backend: f"cpp-{backend}" for backend in BACKENDS}
_RUST_LANGUAGES: dict[str, tuple[str, dict[str, Callable[[Any], Any]], tuple[str, ...]]] = {
    "rust-cpu": ("cpu", {}, ()),
    "rust-cuda-oxide": ("cuda", {"cuda-capabilities": _CAPABILITIES}, ()),
    "rust-cutile": ("cuda", {"tileiras-minver": _version}, ("tileiras-minver",)),
}
_LANGUAGES = (*_CPP_LANGUAGE.values(), *_RUST_LANGUAGES)


def _unit(file: str, name: str, table: Any, general: General, framework: str) -> KernelUnit:
    section = f"kernel.{name}"
    if not UNIT_NAME.match(name):
        raise ManifestError(
            f"{file}: [{section}]: expected a unit name of letters, digits, '_' or '-' (not starting with '-')"
        )
    reader = _Reader(file, section, table)
    tag_key = "language" if general.edition >= 6 else "backend"
    language = _unit_language(reader, general)
    if language in _RUST_LANGUAGES:
        backend, keys, required = _RUST_LANGUAGES[language]
        if framework != "tvm-ffi":
            raise reader.error("language", f"{language!r}: Rust kernels require a [tvm-ffi] framework, this file has [{framework}]")
        spec = {tag_key: _str, "cargo-manifest": _str, "src": _str_list, **keys}
        values = reader.read(spec, required=("cargo-manifest", "src", *required))
        if "tileiras_minver" in values and parse_version(values["tileiras_minver"]) < parse_version(MIN_TILEIRAS):
            raise reader.error("tileiras-minver", f"must be at least {MIN_TILEIRAS}, the first CUDA release with cuTile")
    else:
        backend = next(b for b, lang in _CPP_LANGUAGE.items() if lang == language)
        spec = {tag_key: _str, **_CPP_UNIT_KEYS, **_BACKEND_UNIT_KEYS[backend]}
        other_keys = {k for b, keys in _BACKEND_UNIT_KEYS.items() if b != backend for k in keys}
        misplaced = sorted(set(reader.table) & (other_keys - set(spec)))
        if misplaced:
            owner = next(b for b, keys in _BACKEND_UNIT_KEYS.items() if misplaced[0] in keys)
            tag = f'language = "{_CPP_LANGUAGE[owner]}"' if tag_key == "language" else f'backend = "{owner}"'
            raise reader.error(misplaced[0], f"only valid for {tag}, this unit is \"{reader.table[tag_key]}\"")
        values = reader.read(spec, required=("depends", "src"))
        unknown = [d for d in values["depends"] if d not in KNOWN_DEPENDS]
        if unknown:
            raise reader.error("depends", f"unknown dependency {unknown[0]!r}; known are {', '.join(KNOWN_DEPENDS)}")
    values.pop(tag_key)
    return KernelUnit(name=name, backend=backend, language=language, **values)


def _unit_language(reader: _Reader, general: General) -> str:
    """The unit's edition-6 language: `language` itself, or cpp-<backend> from an older edition's `backend`."""
    table = reader.table
    if general.edition >= 6:
        if "backend" in table:
            raise reader.error("backend", 'edition 6 uses `language` (e.g. language = "cpp-cuda"), not `backend`')
        if "language" not in table:
            raise reader.error("language", f"missing required key; expected one of {', '.join(_LANGUAGES)}")
        language = table["language"]
        if language not in _LANGUAGES:
            raise reader.error("language", f"unknown language {_show(language)}; expected one of {', '.join(_LANGUAGES)}")
        return language
    if "language" in table:
        raise reader.error(
            "language", "`language` is edition 6; this file is edition 5 or has none, which uses `backend` (or run `kbuild migrate`)"
        )
    if "backend" not in table:
        raise reader.error("backend", f"missing required key; expected one of {', '.join(BACKENDS)}")
    backend = table["backend"]
    if backend not in BACKENDS:
        hint = " (a Python-only backend: declare [torch-noarch] and no [kernel.*] units)" if backend in NOARCH_BACKENDS else ""
        raise reader.error("backend", f"unknown backend {_show(backend)}{hint}; expected one of {', '.join(BACKENDS)}")
    return _CPP_LANGUAGE[backend]


def _check_files(file: str, manifest: Manifest) -> None:
    """Every listed source and include folder must exist inside the kernel repo (links
    followed), and the Python package too; kernel_builder.kernel.sources checks what lies in them."""
    root = manifest.root
    checks: list[tuple[str, str, tuple[str, ...], bool]] = []
    if manifest.torch is not None:
        checks.append(("torch", "src", manifest.torch.src, False))
        checks.append(("torch", "include", manifest.torch.include, True))
    if manifest.other is not None:
        checks.append((manifest.other.name, "src", manifest.other.src, False))
        checks.append((manifest.other.name, "include", manifest.other.include, True))
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
    if manifest.framework == "mlx-noarch":
        return  # not built yet: where its package lives is checked when it is
    ext = "tvm-ffi-ext" if manifest.framework == "tvm-ffi" else "torch-ext"
    package = f"{ext}/{manifest.python_name}"
    _check_inside(file, "[general] name", root, package)
    if not (root / package / "__init__.py").is_file():
        raise ManifestError(
            f"{file}: [general] name: expected the Python package at "
            f"{package}/__init__.py for kernel '{manifest.name}'"
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
