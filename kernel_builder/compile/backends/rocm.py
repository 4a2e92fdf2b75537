"""ROCm: the same `.cu` sources as CUDA (no hipify: kernels use a portability header),
compiled by ROCm's clang for each unit's `rocm-archs` (rocm_toolchain finds the tools and
the archs they compile).

With a ROCm torch in the build environment a variant builds through CMake's HIP
language: `.cu` files are marked LANGUAGE HIP, and CMake wants clang itself there, not
the hipcc wrapper. Without one, the device check (rocm_device_check) compiles the device
code of the sources that include no torch header and claims no variant."""

from __future__ import annotations

import dataclasses
from pathlib import Path

# The toolchain by module, so that what a test puts in its place reaches the backend too.
import kernel_builder.compile.backends.rocm_device_check as rocm_device_check
import kernel_builder.compile.backends.rocm_toolchain as rocm_toolchain
from kernel_builder.compile.backends.base import Backend, Toolchain, Unavailable, dotted, tool_version
from kernel_builder.compile.backends.common import (
    CXX_SUFFIXES,
    binding_group,
    cxx_compiler,
    cxx_standard,
    env_target,
    not_this_torch,
    torch_spec,
    unit_group,
)
from kernel_builder.compile.backends.rocm_toolchain import HIP_DEFINITIONS, HIP_SUFFIXES, HIPCC_FLAGS, HIPCC_MISSING
from kernel_builder.compile.cmake import CompileSpec
from kernel_builder.environments.probe import BuildEnv
from kernel_builder.errors import BuildError
from kernel_builder.kernel.manifest import Manifest
from kernel_builder.variants import Variant, parse_version


class RocmBackend(Backend):
    name = "rocm"
    macro = "ROCM_KERNEL"
    tool = "hipcc"
    install = "ROCm/HIP (hipcc) of a ROCm release torch ships"

    def _toolchain_reason(self, rocm: tuple[int, int]) -> str | None:
        hipcc = rocm_toolchain.hipcc_path()
        if hipcc is None:
            return HIPCC_MISSING
        have = rocm_toolchain.hipcc_version(hipcc)
        if have is None:
            return f"{hipcc} --version did not report a HIP version"
        if have[0] != rocm[0]:
            return (
                f"hipcc is HIP {have[0]}.{have[1]} but the variant needs ROCm {rocm[0]}.{rocm[1]}; "
                "hipcc and torch must share the ROCm major version"
            )
        return None

    def target(self, manifest: Manifest | None, env: BuildEnv) -> Variant | Unavailable:
        if rocm_toolchain.hipcc_path() is None:
            return Unavailable(self.name, HIPCC_MISSING)
        if not env.hip:
            return not_this_torch(self.name, env, "ROCm", "a ROCm torch")
        rocm = parse_version(env.hip)
        reason = self._toolchain_reason(rocm)
        if reason:
            return Unavailable(self.name, reason)
        return env_target(manifest, self.name, env, rocm)

    def variant_reason(self, manifest: Manifest | None, variant: Variant, env: BuildEnv | None) -> str | None:
        assert variant.backend_version is not None
        return self._toolchain_reason(variant.backend_version)

    def device_check_possible(self) -> bool:
        """Without a ROCm torch, hipcc can still compile the torch-free device code."""
        return rocm_toolchain.hipcc_path() is not None

    def device_check(self, manifest: Manifest, env: BuildEnv | None, work_dir: Path) -> rocm_device_check.DeviceCheck:
        return rocm_device_check.device_check(manifest, env, work_dir, work_dir / "build.log")

    def toolchain(self) -> Toolchain:
        path = rocm_toolchain.hipcc_path()
        if path is None:
            return Toolchain(self.tool, missing=HIPCC_MISSING)
        return Toolchain(self.tool, path, dotted(rocm_toolchain.hipcc_version(path)), rocm_toolchain.hipcc_id(path))

    def toolchain_ids(self) -> tuple[str, ...]:
        hipcc = rocm_toolchain.hipcc_path()
        cxx = cxx_compiler()
        ids = [rocm_toolchain.hipcc_id(hipcc) if hipcc else None, tool_version(cxx) if cxx else None]
        return tuple(i for i in ids if i)

    def metadata(self, job) -> dict:
        # A noarch variant embeds no device code: kernel-builder writes no archs for it.
        return {"archs": list(self.archs(job))} if job.compiled else {}

    def archs(self, job) -> tuple[str, ...]:
        """Every arch the variant embeds, across units (metadata's backend.archs)."""
        hipcc = rocm_toolchain.require_hipcc()
        supported = rocm_toolchain.supported_archs(job.manifest, hipcc)
        units = job.manifest.units_for(self.name)
        return tuple(dict.fromkeys(a for u in units for a in rocm_toolchain.effective_archs(u, supported, hipcc)))

    def compile_spec(self, job) -> CompileSpec:
        manifest, env = job.manifest, job.env
        hipcc = rocm_toolchain.require_hipcc()
        clang = rocm_toolchain.hip_clang(hipcc)
        if clang is None:
            raise BuildError(f"no clang++ found beside {hipcc} (hipconfig --hipclangpath); CMake compiles HIP with clang")
        supported = rocm_toolchain.supported_archs(manifest, hipcc)
        groups = [binding_group(manifest, CXX_SUFFIXES)]
        for unit in manifest.units_for(self.name):
            arch_flags = tuple(f"--offload-arch={a}" for a in rocm_toolchain.effective_archs(unit, supported, hipcc))
            hip = unit_group(manifest, unit, HIP_SUFFIXES, arch_flags + unit.hip_flags)
            # CMake compiles .cu as CUDA unless told otherwise.
            groups.append(hip and dataclasses.replace(hip, language="HIP"))
            groups.append(unit_group(manifest, unit, CXX_SUFFIXES, unit.cxx_flags))
        rocm = rocm_toolchain.rocm_root(hipcc)
        std = cxx_standard(env)
        cache = {
            "CMAKE_HIP_COMPILER": clang,
            "CMAKE_HIP_PLATFORM": "amd",
            # Architectures come from --offload-arch per unit, never from the GPUs present.
            "CMAKE_HIP_ARCHITECTURES": "OFF",
            "CMAKE_HIP_STANDARD": std,
            "CMAKE_CXX_STANDARD": std,
            "CMAKE_PREFIX_PATH": rocm,  # hip-lang-config.cmake
        }
        compiler = cxx_compiler()
        if compiler:
            cache["CMAKE_CXX_COMPILER"] = compiler
        return torch_spec(
            job, self.macro, ("CXX", "HIP"), groups,
            definitions=HIP_DEFINITIONS,
            language_options=(("CXX", ("-O3",)), ("HIP", HIPCC_FLAGS)),
            # The HIP runtime headers for .cpp glue that the host compiler builds.
            system_includes=(str(Path(rocm) / "include"),),
            link_dirs=(str(Path(rocm) / "lib"),),
            link_libraries=("c10_hip", "torch_hip", "amdhip64"),
            cache=cache,
        )
