"""CPU: the host C++ compiler, every cpu unit linked into one extension with OpenMP.

Each unit keeps its own `cxx-flags`, so an AVX-512 unit is compiled with them while the
rest of the library stays portable; the code picks the path at run time."""

from __future__ import annotations

import os
import shutil

from kernel_builder.backends import Unavailable, tool_version
from kernel_builder.backends.common import (
    binding_group,
    cxx_standard,
    host_platform,
    newest_admitted,
    torch_spec,
    unit_group,
)
from kernel_builder.cmake import CompileSpec
from kernel_builder.envs import BuildEnv
from kernel_builder.manifest import Manifest
from kernel_builder.variants import Variant, arch_variant, stable_abi_variant, parse_version

CXX_SUFFIXES = (".cpp", ".cc", ".cxx", ".c")


def cxx_compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


class CpuBackend:
    name = "cpu"
    macro = "CPU_KERNEL"

    def target(self, manifest: Manifest | None, env: BuildEnv) -> Variant | Unavailable:
        if cxx_compiler() is None:
            return Unavailable(self.name, "no C++ compiler found (install g++ or set CXX)")
        arch, os_ = host_platform()
        abi = manifest.torch.stable_abi_for(self.name) if manifest and manifest.torch else None
        if abi:
            return stable_abi_variant(parse_version(abi), self.name, None, arch, os_)
        return arch_variant(env.torch, self.name, None, arch, os_)

    def variant_reason(self, manifest: Manifest | None, variant: Variant) -> str | None:
        """Why this machine cannot build `variant` given a matching environment, or None."""
        return None if cxx_compiler() else "no C++ compiler found (install g++ or set CXX)"

    def default_variant(self, manifest: Manifest | None) -> Variant | Unavailable:
        """Without a usable build environment: the newest torch of the default matrix that
        the kernel admits, built in a managed environment."""
        if cxx_compiler() is None:
            return Unavailable(self.name, "no C++ compiler found (install g++ or set CXX)")
        abi = manifest.torch.stable_abi_for(self.name) if manifest and manifest.torch else None
        arch, os_ = host_platform()
        if abi:
            return stable_abi_variant(parse_version(abi), self.name, None, arch, os_)
        return newest_admitted(manifest, self.name, None) or Unavailable(
            self.name, f"no torch release in the default matrix fits the kernel's [torch] bounds on {arch}-{os_}"
        )

    def metadata(self, job) -> dict:
        return {}

    def toolchain_ids(self) -> tuple[str, ...]:
        compiler = cxx_compiler()
        return (tool_version(compiler) or f"{compiler}: unknown",) if compiler else ()

    def compile_spec(self, job) -> CompileSpec:
        manifest, env = job.manifest, job.env
        groups = [binding_group(manifest, CXX_SUFFIXES)]
        groups += [unit_group(manifest, u, CXX_SUFFIXES, u.cxx_flags) for u in manifest.units_for(self.name)]
        definitions: tuple[str, ...] = ()  # beyond torch's own (common.torch_spec)
        if job.variant.torch and job.variant.kind.value == "stable-abi":
            major, minor = job.variant.torch
            definitions += (f"TORCH_TARGET_VERSION=(((0ULL + {major}) << 56) | ((0ULL + {minor}) << 48))",)
        compiler = cxx_compiler()
        return torch_spec(
            job, self.macro, ("CXX",), groups,
            definitions=definitions,
            options=("-O3", "-fopenmp"),
            link_options=("-fopenmp",),
            cache={"CMAKE_CXX_STANDARD": cxx_standard(env), **({"CMAKE_CXX_COMPILER": compiler} if compiler else {})},
        )
