"""What every torch backend shares: the host C++ compiler, the binding's sources, the torch include and link
settings, the defines the binding tests (FORMATS.md), and which variant a backend builds:
one per torch release, or one `torch-stable-abi{M}{m}-...` variant when `[torch]
stable-abi` names the backend."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

from kernel_builder.compile.backends.base import Unavailable
from kernel_builder.compile import glibc_compat, unique_symbols
from kernel_builder.compile.cmake import CompileSpec, SourceGroup, generated_include_dir
from kernel_builder.environments.probe import BuildEnv
from kernel_builder.kernel.manifest import KernelUnit, Manifest
from kernel_builder.kernel.registration import NAMESPACE_MACRO, registration_files
from kernel_builder.runtime.system import host_platform
from kernel_builder.variants import (
    Kind,
    Variant,
    arch_variant,
    default_matrix,
    parse_version,
    stable_abi_variant,
)

# C++ sources, which every backend compiles with the host compiler (or its own, e.g. icpx).
CXX_SUFFIXES = (".cpp", ".cc", ".cxx", ".c")

CXX_MISSING = "no C++ compiler found (install g++ or set CXX)"


def cxx_compiler() -> str | None:
    """The host C++ compiler: $CXX, else g++, c++ or clang++ on PATH."""
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


# Stable ABI 3.9+: the PyInit module in registration.h only needs the limited API.
PY_LIMITED_API = "0x03090000"


# torch's headers need C++20 from 2.10 on (its extension builder passes -std=c++20);
# older releases build with C++17.
CXX20_SINCE = (2, 10)


def cxx_standard(env: BuildEnv) -> str:
    return "20" if env.torch >= CXX20_SINCE else "17"


def newest_admitted(manifest: Manifest | None, backend: str, backend_version: tuple[int, int] | None) -> Variant | None:
    """The default matrix's newest variant for this host, backend and backend version
    whose torch the kernel admits: what kbuild builds when no environment says otherwise."""
    here = "-".join(host_platform())
    candidates = [
        v for v in default_matrix().for_backend(backend)
        if v.backend_version == backend_version and v.platform == here and (manifest is None or manifest.admits_torch(v.torch))
    ]
    return max(candidates, key=lambda v: v.torch) if candidates else None


def env_target(
    manifest: Manifest | None,
    backend: str,
    env: BuildEnv,
    backend_version: tuple[int, int] | None,
    platform: tuple[str, str] | None = None,
) -> Variant | Unavailable:
    """The variant `env` builds for a backend whose toolchain fits: its own torch's, or the
    stable-ABI variant, which any torch at least as new as the ABI version compiles.
    `platform` is (arch, os), by default this machine's."""
    arch, os_ = platform or host_platform()
    abi = manifest.stable_abi(backend) if manifest else None
    if abi is None:
        return arch_variant(env.torch, backend, backend_version, arch, os_)
    if env.torch < abi:
        return Unavailable(
            backend,
            f"[torch] stable-abi {abi[0]}.{abi[1]} needs torch {abi[0]}.{abi[1]} or newer to compile; "
            f"the build environment has torch {env.torch_version}",
        )
    return stable_abi_variant(abi, backend, backend_version, arch, os_)


def host_default(manifest: Manifest | None, backend: str, backend_version: tuple[int, int] | None) -> Variant | None:
    """What kbuild builds for a backend when no build environment decides: the stable-ABI
    variant if build.toml names the backend (and a torch of the default matrix can compile
    it), else the newest admitted torch of the matrix."""
    newest = newest_admitted(manifest, backend, backend_version)
    abi = manifest.stable_abi(backend) if manifest else None
    if newest is None or abi is None:
        return newest
    if newest.torch < abi:
        return None
    return stable_abi_variant(abi, backend, backend_version, newest.arch, newest.os)


def target_version_define(abi: tuple[int, int]) -> str:
    """TORCH_TARGET_VERSION for a stable-ABI build: torch's version word
    (torch/headeronly/version.h: major << 56 | minor << 48 | patch << 40 | ABI tag), with
    patch and tag 0, spelled as torch/csrc/stable/version.h documents: 2.10 -> 0x020a000000000000.
    The stable headers then hide every API newer than that release, and torch's other
    headers refuse to compile."""
    major, minor = abi
    return f"TORCH_TARGET_VERSION=0x{(major << 56) | (minor << 48):016x}"


def compiled_files(files: tuple[str, ...], suffixes: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f for f in files if f.endswith(suffixes))


def _source_group(
    root: Path, src: tuple[str, ...], include: tuple[str, ...], suffixes: tuple[str, ...], options: tuple[str, ...]
) -> SourceGroup | None:
    """The files of `src` with these suffixes, as absolute paths, or None when there are none."""
    files = compiled_files(src, suffixes)
    if not files:
        return None
    return SourceGroup(files=tuple(str(root / f) for f in files), options=options, includes=tuple(str(root / i) for i in include))


def binding_group(manifest: Manifest, suffixes: tuple[str, ...]) -> SourceGroup | None:
    torch = manifest.torch
    assert torch is not None
    return _source_group(manifest.root, torch.src, torch.include, suffixes, torch.cxx_flags)


def unit_group(manifest: Manifest, unit: KernelUnit, suffixes: tuple[str, ...], options: tuple[str, ...]) -> SourceGroup | None:
    return _source_group(manifest.root, unit.src, unit.include, suffixes, options)


def source_order(manifest: Manifest, backend: str) -> tuple[str, ...]:
    """The binding's files, then each unit's, as build.toml lists them (absolute paths)."""
    torch = manifest.torch
    listed = (torch.src if torch else ()) + tuple(f for u in manifest.units_for(backend) for f in u.src)
    return tuple(str(manifest.root / f) for f in listed)


def torch_definitions(macro: str, env: BuildEnv) -> tuple[str, ...]:
    """The defines of every file; the op namespace is not one of them (namespace_groups)."""
    return (
        macro,
        f"Py_LIMITED_API={PY_LIMITED_API}",
        f"_GLIBCXX_USE_CXX11_ABI={1 if env.cxx11_abi else 0}",
    )


def torch_includes(manifest: Manifest, env: BuildEnv, work_dir) -> tuple[str, ...]:
    """Every source's include folders. kernel-builder puts the repo's csrc/ on every source's
    path (its extension target's `target_include_directories(... csrc ...)`), and kernels rely
    on it: deep-gemm's torch-ext/torch_binding.h includes "utils/torch_compat.hpp" from csrc/."""
    return (
        str(generated_include_dir(work_dir)),
        str(manifest.root),
        str(manifest.root / "csrc"),
        *env.include_dirs,
        env.python_include,
    )


TORCH_LIBRARIES = ("c10", "torch", "torch_cpu")


def library_target(manifest: Manifest, backend: str) -> str:
    """The CMake target and built library's name, `_<name>_<backend>`: without the op
    namespace id, so CMake's object folder stays put when the id moves."""
    return f"_{manifest.python_name}_{backend}"


def namespace_groups(groups: list[SourceGroup], registering: frozenset[str], ops_name: str) -> list[SourceGroup]:
    """`groups` with the files that register ops split off into groups of their own that
    define TORCH_EXTENSION_NAME (kernel.registration): only their commands name the id."""
    split: list[SourceGroup] = []
    for group in groups:
        own = tuple(f for f in group.files if f in registering)
        rest = tuple(f for f in group.files if f not in registering)
        if rest:
            split.append(replace(group, files=rest))
        if own:
            split.append(replace(group, files=own, definitions=group.definitions + (f"{NAMESPACE_MACRO}={ops_name}",)))
    return split


def merged_options(
    pairs: tuple[tuple[str, tuple[str, ...]], ...], extra: tuple[tuple[str, tuple[str, ...]], ...]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(language, options) pairs with `extra`'s options appended to the same language's."""
    merged: dict[str, tuple[str, ...]] = dict(pairs)
    for language, options in extra:
        merged[language] = merged.get(language, ()) + options
    return tuple(merged.items())


def torch_spec(
    job,
    macro: str,
    languages: tuple[str, ...],
    groups: list[SourceGroup | None],
    *,
    definitions: tuple[str, ...] = (),
    link_dirs: tuple[str, ...] = (),
    link_libraries: tuple[str, ...] = (),
    language_options: tuple[tuple[str, tuple[str, ...]], ...] = (),
    files: tuple[tuple[str, str], ...] = (),
    **fields,
) -> CompileSpec:
    """The CompileSpec every torch backend shares (the library, the op namespace for the
    files that register ops, torch's defines, headers and libraries), plus the backend's own
    `fields`."""
    env = job.env
    if job.variant.kind is Kind.STABLE_ABI:
        definitions = (target_version_define(job.variant.torch),) + definitions
    if job.variant.os == "linux":
        # One copy of each static per kernel, not per process (kernel_builder.compile.unique_symbols).
        language_options = merged_options(language_options, unique_symbols.language_options(languages, fields.get("cache", {})))
    if job.variant.os == "linux" and "CXX" in languages:
        # Within manylinux_2_28 on a newer glibc (kernel_builder.compile.glibc_compat).
        groups = [*groups, glibc_compat.compat_group()]
        files += ((glibc_compat.HEADER, glibc_compat.header_text()),)
        language_options = merged_options(language_options, glibc_compat.force_include_options(job.work_dir, languages))
    present = [g for g in groups if g is not None]
    return CompileSpec(
        source_order=source_order(job.manifest, job.variant.backend),
        target=library_target(job.manifest, job.backend),
        suffix=".abi3.so",
        languages=languages,
        groups=tuple(namespace_groups(present, registration_files(job.manifest), job.ops_name)),
        definitions=torch_definitions(macro, env) + definitions,
        includes=torch_includes(job.manifest, env, job.work_dir),
        link_dirs=(env.library_dir, *link_dirs),
        link_libraries=TORCH_LIBRARIES + link_libraries,
        language_options=language_options,
        files=files,
        **fields,
    )


def not_this_torch(backend: str, env: BuildEnv, flavour: str, needed: str) -> Unavailable:
    """The skip reason of a GPU backend whose build environment has another torch flavour."""
    return Unavailable(backend, f"the build environment's torch {env.torch_version} is not a {flavour} build; {flavour} variants need {needed}")
