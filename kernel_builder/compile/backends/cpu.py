"""CPU: the host C++ compiler, every cpu unit linked into one extension with OpenMP.

Each unit keeps its own `cxx-flags`, so an AVX-512 unit is compiled with them while the
rest of the library stays portable; the code picks the path at run time."""

from __future__ import annotations

import os
import shutil

from kernel_builder.compile.backends.base import Unavailable, tool_version
from kernel_builder.compile.backends.common import (
    binding_group,
    cxx_standard,
    env_target,
    host_default,
    host_platform,
    torch_spec,
    unit_group,
)
from kernel_builder.compile.cmake import CompileSpec
from kernel_builder.environments.probe import BuildEnv
from kernel_builder.kernel.manifest import Manifest
from kernel_builder.variants import Variant

CXX_SUFFIXES = (".cpp", ".cc", ".cxx", ".c")


def cxx_compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


class CpuBackend:
    name = "cpu"
    macro = "CPU_KERNEL"

    def target(self, manifest: Manifest | None, env: BuildEnv) -> Variant | Unavailable:
        if cxx_compiler() is None:
            return Unavailable(self.name, "no C++ compiler found (install g++ or set CXX)")
        return env_target(manifest, self.name, env, None)

    def variant_reason(self, manifest: Manifest | None, variant: Variant) -> str | None:
        """Why this machine cannot build `variant` given a matching environment, or None."""
        return None if cxx_compiler() else "no C++ compiler found (install g++ or set CXX)"

    def default_variant(self, manifest: Manifest | None) -> Variant | Unavailable:
        """Without a usable build environment: the stable-ABI variant or the newest torch of
        the default matrix that the kernel admits, built in a managed environment."""
        if cxx_compiler() is None:
            return Unavailable(self.name, "no C++ compiler found (install g++ or set CXX)")
        return host_default(manifest, self.name, None) or Unavailable(
            self.name, f"no torch release in the default matrix fits the kernel's [torch] bounds on {'-'.join(host_platform())}"
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
        compiler = cxx_compiler()
        return torch_spec(
            job, self.macro, ("CXX",), groups,
            options=("-O3", "-fopenmp"),
            link_options=("-fopenmp",),
            cache={"CMAKE_CXX_STANDARD": cxx_standard(env), **({"CMAKE_CXX_COMPILER": compiler} if compiler else {})},
        )
