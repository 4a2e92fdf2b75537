"""CPU: the host C++ compiler, every cpu unit linked into one extension with OpenMP.

Each unit keeps its own `cxx-flags`, so an AVX-512 unit is compiled with them while the
rest of the library stays portable; the code picks the path at run time. A variant for
another architecture (aarch64-linux on x86_64) is cross-compiled: the GNU cross compiler,
through a CMake toolchain file (kernel_builder.environments.cross_target)."""

from __future__ import annotations

import re
from pathlib import Path

from kernel_builder.compile.backends.base import Backend, Toolchain, Unavailable, short_version, tool_version
from kernel_builder.compile.backends.common import (
    CXX_MISSING,
    CXX_SUFFIXES,
    binding_group,
    compilers,
    cxx_compiler,
    cxx_standard,
    env_target,
    host_default,
    torch_spec,
    unit_group,
)
from kernel_builder.compile.cmake import CompileSpec
from kernel_builder.environments.cross_target import compiler_missing, describe_route, emulator_missing, target_for
from kernel_builder.environments.probe import BuildEnv
from kernel_builder.kernel.manifest import Manifest
from kernel_builder.runtime.system import host_platform
from kernel_builder.variants import Variant


# x86 instruction-set options (-mavx512f, -mfma, ...): a unit's `cxx-flags` for its x86 code
# path, which its sources guard with `#if defined(__x86_64__)` and pick at run time. An
# aarch64 compiler rejects them; there the unit compiles without them (to nothing x86).
_X86_ISA_FLAG = re.compile(
    r"^-m(?:no-)?(?:avx\w*|sse\w*|fma4?|f16c|bmi2?|lzcnt|popcnt|amx[\w-]*|vaes|vpclmulqdq|gfni|aes|pclmul|sha|adx"
    r"|rdrnd|rdseed|movbe|xsave\w*|prefer-vector-width=\w+)$"
)


def unit_flags(flags: tuple[str, ...], arch: str | None) -> tuple[str, ...]:
    """A unit's `cxx-flags` for a variant of `arch`: all of them on x86_64, without the x86
    instruction-set options elsewhere."""
    if arch in (None, "x86_64"):
        return flags
    return tuple(f for f in flags if not _X86_ISA_FLAG.match(f))


class CpuBackend(Backend):
    name = "cpu"
    macro = "CPU_KERNEL"
    tool = "c++"
    install = "a C++ compiler: apt-get install g++ (or set CXX)"
    cross_compiles = True

    def target(self, manifest: Manifest | None, env: BuildEnv) -> Variant | Unavailable:
        if cxx_compiler() is None:
            return Unavailable(self.name, CXX_MISSING)
        return env_target(manifest, self.name, env, None)

    def variant_reason(self, manifest: Manifest | None, variant: Variant, env: BuildEnv | None) -> str | None:
        target = target_for(variant.platform)
        if target is not None:
            return compiler_missing(target)
        return None if cxx_compiler() else CXX_MISSING

    def toolkit_note(self, variant: Variant) -> str | None:
        """A cross-built variant says so: its compiler, where its import check and tests run,
        and what is missing for them."""
        target = target_for(variant.platform)
        if target is None:
            return None
        missing = emulator_missing(target)
        return describe_route(variant.platform) + (f"; {missing}" if missing else "")

    def default_variant(self, manifest: Manifest | None) -> Variant | Unavailable:
        """The stable-ABI variant or the newest torch of the default matrix that the kernel
        admits."""
        if cxx_compiler() is None:
            return Unavailable(self.name, CXX_MISSING)
        return host_default(manifest, self.name, None) or Unavailable(
            self.name, f"no torch release in the default matrix fits the kernel's [torch] bounds on {'-'.join(host_platform())}"
        )

    def toolchain(self) -> Toolchain:
        path = cxx_compiler()
        if path is None:
            return Toolchain(self.tool, missing=CXX_MISSING)
        line = tool_version(path)
        return Toolchain(Path(path).name, path, short_version(line), line)

    def toolchain_ids(self) -> tuple[str, ...]:
        compiler = cxx_compiler()
        return (tool_version(compiler) or f"{compiler}: unknown",) if compiler else ()

    def compile_spec(self, job) -> CompileSpec:
        manifest, env = job.manifest, job.env
        groups = [binding_group(manifest, CXX_SUFFIXES)]
        groups += [unit_group(manifest, u, CXX_SUFFIXES, unit_flags(u.cxx_flags, job.variant.arch))
                   for u in manifest.units_for(self.name)]
        compiler, cache = compilers(job)
        cache["CMAKE_CXX_STANDARD"] = cxx_standard(env)
        return torch_spec(
            job, self.macro, ("CXX",), groups,
            options=("-O3", "-fopenmp"),
            link_options=("-fopenmp",),
            cache={**cache, **({"CMAKE_CXX_COMPILER": compiler} if compiler else {})},
        )
