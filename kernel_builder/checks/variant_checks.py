"""Checks of a built variant folder, each ending in ok, failed (with what was found) or
skipped (with why):

- `abi`: the ELF symbol versions every `.so` requires stay within manylinux_2_28, so the
  variant loads on any Linux that manylinux wheels load on;
- `needed`: every NEEDED library is the C/C++ runtime, torch's, or the backend's own;
- `stable-abi` (stable-ABI variants only): no `.so` imports a torch symbol outside the
  stable C shim (kernel_builder.checks.stable_symbols);
- `gnu-unique`: no `.so` exports a `gnu_unique` symbol, which the dynamic linker keeps once
  per process, so two kernels would share its state (kernel_builder.compile.unique_symbols);
- `metadata`: metadata.json has every key the runtime requires and its digests match the files;
- `import`: the variant imports in its own build environment, with the kernel's runtime needs
  added (kernel_builder.environments.runtime_overlay), and registers its ops, none outside
  its op namespace.

The policies are data (data/check_policy.toml). `check_variant(folder)` runs them all on
one folder, so a build can call it on what it just produced; `kbuild check` runs it on
every variant of a kernel repo or build folder.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import tomllib
from contextlib import ExitStack
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from kernel_builder.environments.cross_env import emulated_ready
from kernel_builder.environments.cross_target import Route, route
from kernel_builder.checks.import_process import ImportProcess
from kernel_builder.errors import KbuildError, UsageError
from kernel_builder.runtime.digest import verify_digest
from kernel_builder.runtime.loader import STAGING_PREFIX, read_metadata
from kernel_builder.runtime.system import detect_arch, detect_os
from kernel_builder.environments.runtime_overlay import RuntimeEnvError, runtime_python, variant_runtime_needs
from kernel_builder.checks.stable_symbols import torch_imports
from kernel_builder.compile import glibc_compat
from kernel_builder.variants import Kind, Variant, try_parse
from kernel_builder.assemble.zip_layout import ArchiveError, package_files_of

OK, FAILED, SKIPPED = "ok", "failed", "skipped"
# A finding that does not fail: the abi check of a local build, whose libraries follow the
# build machine's glibc; portable variants come from --runner docker (manylinux_2_28).
WARNING = "warning"
_SYMBOLS_SHOWN = 3  # names listed per finding: enough to find the call, short enough to read
_IMPORT_TIMEOUT_S = 300


class CheckTargetError(UsageError):
    """`kbuild check` was pointed at something that holds no variant folders."""


@dataclass(frozen=True)
class CheckResult:
    check: str  # abi, needed, stable-abi, gnu-unique, metadata, import
    status: str  # ok, failed, skipped, warning
    detail: str  # one line: what passed, the findings, or why skipped
    findings: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"check": self.check, "status": self.status, "detail": self.detail, "findings": list(self.findings)}


def _ok(check: str, detail: str) -> CheckResult:
    return CheckResult(check, OK, detail)


def _skipped(check: str, reason: str) -> CheckResult:
    return CheckResult(check, SKIPPED, reason)


def _failed(check: str, findings: list[str]) -> CheckResult:
    return CheckResult(check, FAILED, "; ".join(findings), tuple(findings))


@dataclass(frozen=True)
class VariantReport:
    folder: Path
    results: tuple[CheckResult, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return all(r.status != FAILED for r in self.results)

    def to_json(self) -> dict:
        return {
            "variant": self.folder.name,
            "path": str(self.folder),
            "ok": self.ok,
            "checks": [r.to_json() for r in self.results],
        }


# -- policy -------------------------------------------------------------------------
@dataclass(frozen=True)
class Policy:
    max_versions: dict[str, tuple[int, ...]]  # GLIBC -> (2, 28)
    needed: dict[str, tuple[str, ...]]  # "any" or a backend -> soname globs

    def allowed_needed(self, backend: str | None) -> tuple[str, ...]:
        return self.needed["any"] + self.needed.get(backend or "", ())


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


@functools.cache
def load_policy() -> Policy:
    data = tomllib.loads(resources.files("kernel_builder").joinpath("data/check_policy.toml").read_text())
    return Policy(
        max_versions={name: _version_tuple(v) for name, v in data["symbol-versions"].items()},
        needed={key: tuple(globs) for key, globs in data["needed"].items()},
    )


# -- reading ELF files --------------------------------------------------------------
@dataclass(frozen=True)
class ElfDependencies:
    needed: tuple[str, ...]
    symbols_by_version: dict[str, tuple[str, ...]]  # "GLIBC_2.34" -> undefined symbols bound to it


def _is_elf(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"\x7fELF"


def read_elf_dependencies(path: Path) -> ElfDependencies:
    """The DT_NEEDED entries and, from .gnu.version_r and .gnu.version, which versioned
    symbols the library imports."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection

    with path.open("rb") as f:
        elf = ELFFile(f)
        sections = list(elf.iter_sections())
        needed = tuple(
            tag.needed
            for section in sections if isinstance(section, DynamicSection)
            for tag in section.iter_tags() if tag.entry.d_tag == "DT_NEEDED"
        )
        version_names: dict[int, str] = {}
        for section in sections:
            if isinstance(section, GNUVerNeedSection):
                for _library, entries in section.iter_versions():
                    version_names.update((aux["vna_other"], aux.name) for aux in entries)
        versym = next((s for s in sections if isinstance(s, GNUVerSymSection)), None)
        dynsym = next((s for s in sections if s["sh_type"] == "SHT_DYNSYM"), None)
        symbols: dict[str, list[str]] = {name: [] for name in version_names.values()}
        if versym is not None and dynsym is not None:
            for i, symbol in enumerate(dynsym.iter_symbols()):
                index = versym.get_symbol(i)["ndx"]
                if symbol["st_shndx"] == "SHN_UNDEF" and isinstance(index, int):
                    name = version_names.get(index & 0x7FFF)  # the high bit marks a hidden version
                    if name is not None:
                        symbols[name].append(symbol.name)
    return ElfDependencies(needed, {name: tuple(sorted(s)) for name, s in symbols.items()})


# Binding 10, the first OS-specific one, which GNU systems use for gnu_unique: pyelftools
# names it STB_LOOS.
_GNU_UNIQUE = ("STB_GNU_UNIQUE", "STB_LOOS")


def gnu_unique_symbols(path: Path) -> tuple[str, ...]:
    """The symbols a library defines with the binding STB_GNU_UNIQUE (`u` in nm), demangled
    when c++filt is here."""
    from elftools.elf.elffile import ELFFile

    with path.open("rb") as f:
        dynsym = next((s for s in ELFFile(f).iter_sections() if s["sh_type"] == "SHT_DYNSYM"), None)
        names = sorted(
            symbol.name for symbol in (dynsym.iter_symbols() if dynsym is not None else ())
            if symbol["st_info"]["bind"] in _GNU_UNIQUE and symbol["st_shndx"] != "SHN_UNDEF"
        )
    return _demangled(names)


def _demangled(names: list[str]) -> tuple[str, ...]:
    demangler = shutil.which("c++filt")
    if not names or demangler is None:
        return tuple(names)
    done = subprocess.run([demangler], input="\n".join(names), capture_output=True, text=True, check=False)
    lines = done.stdout.splitlines()
    return tuple(lines) if done.returncode == 0 and len(lines) == len(names) else tuple(names)


def shared_libraries(folder: Path) -> list[Path]:
    return sorted(
        p for p in folder.rglob("*")
        if p.is_file() and (p.name.endswith(".so") or ".so." in p.name) and "__pycache__" not in p.parts
    )


def _elf_libraries(folder: Path, variant: Variant | None, check: str) -> list[Path] | CheckResult:
    """The ELF libraries to judge, or the reason the check does not apply."""
    if variant is not None and variant.os not in (None, "linux"):
        return _skipped(check, f"{variant.os} variant: the ELF checks apply to Linux builds only")
    libraries = [p for p in shared_libraries(folder) if _is_elf(p)]
    if not libraries:
        return _skipped(check, "no ELF shared libraries (a pure-Python variant)")
    return libraries


def _split_version(version: str) -> tuple[str, tuple[int, ...]]:
    """'GLIBC_2.32' -> ('GLIBC', (2, 32)); names without a number (GLIBC_PRIVATE) -> (name, ())."""
    m = re.fullmatch(r"([A-Za-z]+)_(\d+(?:\.\d+)*)", version)
    return (m.group(1), _version_tuple(m.group(2))) if m else (version, ())


def _too_new(version: str, policy: Policy) -> str | None:
    """'GLIBC_2.32' -> '2.28' when it exceeds the policy's limit for GLIBC, else None."""
    namespace, number = _split_version(version)
    limit = policy.max_versions.get(namespace)
    return ".".join(map(str, limit)) if limit is not None and number > limit else None


def _shown(names) -> str:
    names = list(names)
    return ", ".join(names[:_SYMBOLS_SHOWN]) + (", ..." if len(names) > _SYMBOLS_SHOWN else "")


def portability_advice(version: str, symbols: tuple[str, ...]) -> str:
    """What to do about symbols bound to a version beyond the policy: a rebuild when kbuild's
    generated build pins them all (compile/glibc_compat.py; a library built without its
    header, by an older kbuild say, still has them), else the manylinux image."""
    namespace, _ = _split_version(version)
    unpinned = [s for s in symbols if namespace != "GLIBC" or s not in glibc_compat.PINNED]
    if symbols and not unpinned:
        return (
            f"kbuild pins {_shown(symbols)} to an older version in the builds it generates "
            "(glibc_compat.h); rebuild the variant with `kbuild build`"
        )
    what = _shown(unpinned) or "this version"
    return f"{what} cannot be pinned to an older version; build with `kbuild build --runner docker` (the manylinux_2_28 image)"


# -- the checks ---------------------------------------------------------------------
def check_abi(folder: Path, variant: Variant | None = None, policy: Policy | None = None) -> CheckResult:
    """Every symbol version a `.so` requires is within manylinux_2_28."""
    policy = policy or load_policy()
    libraries = _elf_libraries(folder, variant, "abi")
    if isinstance(libraries, CheckResult):
        return libraries
    findings = []
    newest_glibc: tuple[int, ...] = ()
    for library in libraries:
        required = read_elf_dependencies(library).symbols_by_version
        for version in sorted(required, key=_split_version):
            namespace, number = _split_version(version)
            if namespace == "GLIBC":
                newest_glibc = max(newest_glibc, number)
            limit = _too_new(version, policy)
            if limit is None:
                continue
            symbols = required[version]
            findings.append(
                f"{library.relative_to(folder)} needs {version} ({_shown(symbols) or 'no symbol named'}) > {limit}: "
                + portability_advice(version, symbols)
            )
    if findings:
        failed = _failed("abi", findings)
        if newest_glibc > policy.max_versions.get("GLIBC", ()):
            # Built on a newer glibc (another base image, this machine): say what it does meet.
            meets = f"as built, the variant meets manylinux_{newest_glibc[0]}_{newest_glibc[1]} (glibc {'.'.join(map(str, newest_glibc))})"
            failed = CheckResult(failed.check, failed.status, f"{failed.detail}; {meets}", failed.findings)
        return failed
    limits = ", ".join(f"{name} <= {'.'.join(map(str, v))}" for name, v in policy.max_versions.items())
    return _ok("abi", f"manylinux_2_28: {limits} ({len(libraries)} librar{'y' if len(libraries) == 1 else 'ies'})")


def check_needed(folder: Path, variant: Variant | None = None, policy: Policy | None = None) -> CheckResult:
    """Every NEEDED library is allowed for the variant's backend."""
    policy = policy or load_policy()
    libraries = _elf_libraries(folder, variant, "needed")
    if isinstance(libraries, CheckResult):
        return libraries
    allowed = policy.allowed_needed(variant.backend if variant else None)
    findings = []
    for library in libraries:
        unexpected = [n for n in read_elf_dependencies(library).needed if not any(fnmatch.fnmatch(n, g) for g in allowed)]
        if unexpected:
            findings.append(f"{library.relative_to(folder)} needs unexpected {', '.join(unexpected)}")
    if findings:
        backend = variant.backend if variant else "unknown"
        return _failed("needed", [*findings, f"allowed: C/C++ runtime, torch and the {backend} runtime"])
    return _ok("needed", "only the C/C++ runtime, torch and the backend's runtime")


# ELF e_machine values (pyelftools' names) of the architectures variant names spell.
ELF_MACHINES = {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64"}


def check_machine(folder: Path, variant: Variant | None = None) -> CheckResult:
    """Every library is compiled for the variant's architecture (a cross build's aarch64
    code in an aarch64 folder, never this machine's)."""
    libraries = _elf_libraries(folder, variant, "arch")
    if isinstance(libraries, CheckResult):
        return libraries
    if variant is None or variant.arch not in ELF_MACHINES:
        return _skipped("arch", "the folder name does not say a known architecture")
    from elftools.elf.elffile import ELFFile

    findings = []
    for library in libraries:
        with open(library, "rb") as f:
            machine = ELFFile(f).header["e_machine"]
        if machine != ELF_MACHINES[variant.arch]:
            findings.append(f"{library.relative_to(folder)} is {machine.removeprefix('EM_').lower()} code, not {variant.arch}")
    if findings:
        return _failed("arch", findings)
    return _ok("arch", f"{variant.arch} code ({len(libraries)} librar{'y' if len(libraries) == 1 else 'ies'})")


def check_stable_abi(folder: Path, variant: Variant | None = None) -> CheckResult:
    """A stable-ABI variant reaches torch only through the stable C shim, so it loads on
    every torch from its ABI version on."""
    if variant is None or variant.kind is not Kind.STABLE_ABI:
        return _skipped("stable-abi", "not a stable-ABI variant")
    libraries = _elf_libraries(folder, variant, "stable-abi")
    if isinstance(libraries, CheckResult):
        return libraries
    shim: set[str] = set()
    found = []
    for library in libraries:
        imports = torch_imports(library)
        shim.update(imports.shim)
        found += [(library.relative_to(folder), name) for name in imports.non_stable]
    if found:
        detail = f"{len(found)} torch symbol{'s' if len(found) != 1 else ''} outside the stable C shim: {_shown(n for _, n in found)}"
        return CheckResult("stable-abi", FAILED, detail, tuple(f"{library} uses {name}" for library, name in found))
    return _ok("stable-abi", f"torch only through the stable C shim ({len(shim)} functions)")


def check_gnu_unique(folder: Path, variant: Variant | None = None) -> CheckResult:
    """No library exports a gnu_unique symbol: the dynamic linker keeps one per process, so
    every kernel with the same class (a function-local static, a template's static member)
    would share it."""
    libraries = _elf_libraries(folder, variant, "gnu-unique")
    if isinstance(libraries, CheckResult):
        return libraries
    findings = []
    for library in libraries:
        names = gnu_unique_symbols(library)
        if names:
            findings.append(
                f"{library.relative_to(folder)} exports {len(names)} gnu_unique symbol{'s' if len(names) != 1 else ''} "
                f"({_shown(names)}), which every kernel in the process would share: compile with -fno-gnu-unique "
                "(`kbuild build` does, with GCC)"
            )
    if findings:
        return _failed("gnu-unique", findings)
    return _ok("gnu-unique", "no gnu_unique symbols: each kernel keeps its own statics")


def check_metadata(folder: Path) -> CheckResult:
    """metadata.json has every required key, and every file matches its digest."""
    try:
        metadata = read_metadata(folder)
    except KbuildError as e:
        return _failed("metadata", [e.message])
    problems = verify_digest(folder, metadata)
    if problems:
        return _failed("metadata", problems)
    return _ok("metadata", f"complete; {len(metadata['digest']['files'])} files match their digests")


def _as_warning(result: CheckResult, why: str) -> CheckResult:
    if result.status != FAILED:
        return result
    return CheckResult(result.check, WARNING, f"{result.detail} ({why})", result.findings)


def _environment_python(variant: Variant | None) -> str | CheckResult:
    """The interpreter of the variant's build environment, or why there is none here.
    Never creates one: checking must not install torch."""
    from kernel_builder.environments.choice import EnvChooser

    if variant is None:
        return _skipped("import", "the folder name is not a variant name, so its environment is unknown")
    cross = variant.platform is not None and variant.platform != f"{detect_arch()}-{detect_os()}"
    if cross and route(variant.platform) is not Route.CROSS:
        return _skipped("import", f"built for {variant.platform}, this machine is {detect_arch()}-{detect_os()}")
    chooser = EnvChooser.from_options(create=False)
    if variant.kind is Kind.NOARCH:
        if chooser.primary is None:
            return _skipped("import", "the running interpreter has no torch")
        return chooser.primary.python
    if not chooser.available(variant):
        spec = chooser.spec_for(variant)
        return _skipped(
            "import", f"no build environment with {spec.describe()} here (`kbuild env create {spec.key}` makes one)"
        )
    env = chooser.env_for(variant)
    if cross and not emulated_ready(env):
        return _skipped("import", f"built for {variant.platform}: its import runs in an emulated {env.arch} Python, "
                        f"not made here yet (`kbuild build --variant {variant.name}` makes it, once)")
    return env.python


def check_import(
    folder: Path, variant: Variant | None = None, python: str | None = None, prepared: ImportProcess | None = None
) -> CheckResult:
    """The variant imports in its build environment (or `python`) and registers ops under its
    id. A build passes the `prepared` process it started while compiling; it is used when the
    import runs in its interpreter, and the caller closes it either way."""
    python = python or _environment_python(variant)
    if isinstance(python, CheckResult):
        return python
    # The kernel's runtime needs (python-depends, triton, other third-party imports) are met in an
    # overlay over the build environment; needs pip cannot install here skip the check (runtime_env).
    metadata = _metadata_or_empty(folder)
    try:
        with package_files_of(folder, metadata) as package:  # a zip variant's files are read from its archive
            needs = variant_runtime_needs(package, metadata)
        unmet = needs.unmet_imports(python)
        if unmet:
            raise RuntimeEnvError("; ".join(why for _, why in unmet))
        python = runtime_python(python, needs.packages)
    except RuntimeEnvError as exc:
        return _skipped("import", f"the kernel's runtime needs cannot be met here: {exc.message}")
    except ArchiveError as exc:
        return _failed("import", [exc.message])
    backend = "cpu" if variant.backend == "cpu" else ""
    with ExitStack() as stack:
        process = prepared if prepared is not None and prepared.python == python else None
        process = process or stack.enter_context(ImportProcess(python))
        target = folder.resolve()
        if variant is not None and variant.kind is Kind.NOARCH and variant.backend != "cpu":
            # A noarch variant for another device is the same Python: import it here under a
            # neutral folder name, which the loader does not hold to this machine's backend.
            target = process.folder / "noarch-variant"
            os.symlink(folder.resolve(), target)
        try:
            done = process.run(target, backend, _IMPORT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return _failed("import", [f"the import did not finish within {_IMPORT_TIMEOUT_S} s ({python})"])
    if done.returncode != 0:
        foreign = _foreign_failure(done.stderr, folder)
        if foreign and variant is not None and variant.kind is Kind.NOARCH and variant.backend != "cpu":
            # A dependency of another device's kernel that does not import here (PyPI's `nki` is a
            # placeholder off Neuron machines): where the runtime does not allow it, not the kernel's fault.
            return _skipped("import", f"a dependency of this {variant.backend} kernel does not import on this machine: {foreign}")
        return _failed("import", [f"import failed in {python}: {_import_error(done.stderr, folder, done.returncode)}"])
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    ops = answer["ops"]
    if answer["outside"]:
        return _failed("import", [_outside_namespace(answer["outside"], _metadata_or_empty(folder).get("id", "its id"))])
    if ops:
        shown = _shown(op.split("::", 1)[1] for op in ops)
        return _ok("import", f"imports in {python}; registers {len(ops)} op{'s' if len(ops) != 1 else ''}: {shown}")
    if shared_libraries(folder):
        return _failed("import", [f"imports in {python} but registers no ops under its id"])
    return _ok("import", f"imports in {python} (pure Python, no ops)")


def _outside_namespace(ops: list[str], namespace: str) -> str:
    """The finding for ops a variant registers outside its namespace, which a second build of
    the kernel (or another kernel choosing the same name) would collide with."""
    return (
        f"registers {_shown(ops)} outside its op namespace {namespace}: register with "
        "TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ...) in C++ and add_op_namespace_prefix(...) from _ops in Python"
    )


def _metadata_or_empty(folder: Path) -> dict:
    try:
        return read_metadata(folder)
    except Exception:  # the metadata check reports it; the needs then come from the files alone
        return {}


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Warning)\b")


def _signal_name(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} (signal {number})"
    except ValueError:
        return f"signal {number}"


def _import_error(stderr: str, folder: Path, returncode: int) -> str:
    """The exception line of a failed import and the deepest frame in the kernel's own files."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    exception = next((line.strip() for line in reversed(lines) if _EXCEPTION.match(line)), None)
    if exception is None and returncode < 0:
        # Killed by a signal (a crash in a library's static initializers, say): stderr's last
        # line is whatever came before, often an unrelated warning.
        exception = f"the import crashed: {_signal_name(-returncode)}"
    exception = exception or (lines[-1].strip() if lines else f"exit {returncode}")
    root = str(folder.resolve())
    frames = [m for m in map(_FRAME.match, lines) if m and m["file"].startswith(root)]
    if not frames:
        return exception
    where = os.path.relpath(frames[-1]["file"], root)
    return f"{exception} (at {where}:{frames[-1]['line']})"


def _foreign_failure(stderr: str, folder: Path) -> str | None:
    """The exception and file when a failed import raised outside the kernel's own files, else None."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    frames = [m for m in map(_FRAME.match, lines) if m]
    exception = next((line.strip() for line in reversed(lines) if _EXCEPTION.match(line)), None)
    if not frames or exception is None or frames[-1]["file"].startswith(str(folder.resolve())):
        return None
    return f"{exception} (in {frames[-1]['file']})"


def check_variant(
    folder: Path,
    *,
    import_check: bool,
    strict_abi: bool,
    variant: Variant | None = None,
    python: str | None = None,
    prepared: ImportProcess | None = None,
) -> VariantReport:
    """Run every check on one variant folder; `import_check` imports it too. A build passes
    what it knows: the `variant` (its staging folder has another name) and its environment's
    `python`, and the import check's `prepared` interpreter (kernel_builder.checks.import_process),
    started while it compiled. Without `strict_abi` (a local build, by default) symbol versions beyond
    manylinux_2_28 are a warning. The two have no default here: a build's come from
    kernel_builder.pipeline.options.BuildOptions, a built folder's from `check_build`."""
    folder = Path(folder)
    variant = variant or try_parse(folder.name)
    abi = check_abi(folder, variant)
    if not strict_abi:
        abi = _as_warning(abi, "a local build follows this machine's glibc; --runner docker builds portable variants")
    results = [
        abi, check_machine(folder, variant), check_needed(folder, variant), check_stable_abi(folder, variant), check_gnu_unique(folder, variant),
        check_metadata(folder),
    ]
    if import_check:
        results.append(check_import(folder, variant, python, prepared))
    return VariantReport(folder, tuple(results))


# -- finding the variant folders ----------------------------------------------------
def _is_variant_folder(path: Path) -> bool:
    return path.is_dir() and (try_parse(path.name) is not None or (path / "metadata.json").is_file())


def variant_folders(target: Path) -> list[Path]:
    """`target` is a kernel repo (its build/ folder is searched), a build folder or one
    variant folder."""
    if not target.exists():
        raise CheckTargetError(f"{target} does not exist; pass a kernel repo, its build/ folder or a variant folder")
    if not target.is_dir():
        raise CheckTargetError(f"{target} is not a folder; pass a kernel repo, its build/ folder or a variant folder")
    if _is_variant_folder(target):
        return [target]
    base = target / "build" if (target / "build").is_dir() else target
    found = sorted(
        p for p in base.iterdir() if not p.name.startswith(STAGING_PREFIX) and _is_variant_folder(p)
    )
    if not found:
        hint = "build the kernel first (kbuild build)" if (target / "build.toml").is_file() else (
            "pass a kernel repo, its build/ folder or a variant folder"
        )
        raise CheckTargetError(
            f"no variant folders in {base} (expected folders such as torch213-cxx11-cpu-x86_64-linux); {hint}"
        )
    return found


def check_build(target: Path, *, import_check: bool = True) -> list[VariantReport]:
    """Check the built variants in `target` (`kbuild check`, and before `kbuild publish`):
    what is shipped must be portable, so the ABI check is always strict here."""
    return [check_variant(folder, import_check=import_check, strict_abi=True) for folder in variant_folders(Path(target))]
