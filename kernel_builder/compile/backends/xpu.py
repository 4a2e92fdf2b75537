"""XPU: Intel oneAPI `icpx -fsycl` against an XPU build of torch.

Every source compiles with icpx and `-fsycl`; a unit's `sycl-flags` go on its own sources
and, as one group, on the link too: SYCL finishes device code when it links (ahead-of-time
targets run the device compiler there), so `-fsycl-targets=...` and `-Xs ...` must reach
that step, and picking the device-target flags out of a list would mean knowing every
option and how many arguments it takes. Compile-only flags are ignored by the link.

The variant is named after the oneAPI release torch was built with (`torch.version.xpu`);
icpx must be of the same year, the unit of libsycl's ABI (libsycl.so.8 is 2025.x)."""

from __future__ import annotations

import dataclasses
import functools
import re
import shlex
import shutil

from kernel_builder.compile.backends.base import Backend, Toolchain, Unavailable, dotted, tool_version
from kernel_builder.compile.backends.common import (
    CXX_SUFFIXES,
    binding_group,
    cxx_standard,
    env_target,
    torch_spec,
    unit_group,
)
from kernel_builder.compile.cmake import CompileSpec
from kernel_builder.environments.probe import BuildEnv
from kernel_builder.kernel.manifest import Manifest
from kernel_builder.variants import Variant, xpu_version

# torch's convention for SYCL sources; neither CMake nor icpx knows the extension, so
# they are C++ explicitly.
SYCL_SUFFIXES = (".sycl",)
SYCL_SOURCE_FLAGS = ("-x", "c++")

# kernel-builder's SYCL flags (kernels#734, #752): IEEE-conforming fp32 division and square root
# and no fast-math folding, as PyTorch's own XPU build, on the compile and the link step.
SYCL_FLAGS = (
    "-fsycl", "-fhonor-nans", "-fhonor-infinities", "-fno-associative-math", "-fno-approx-func",
    "-foffload-fp32-prec-div", "-foffload-fp32-prec-sqrt",
)
SYCL_COMPILE_ONLY = ("-fno-sycl-instrument-device-code", "--offload-compress")
# One ahead-of-time image per device in one spir64_gen image, plus spir64 for JIT on any
# other GPU; Crescent Island (cri) needs DPC++ 2026.0 or later.
SYCL_TARGETS = "-fsycl-targets=spir64_gen,spir64"
AOT_DEVICES = ("pvc", "bmg-g21")
CRI_SINCE = (2026, 0)
AOT_OPTIONS = "-cl-intel-enable-auto-large-GRF-mode -cl-poison-unsupported-fp64-kernels -cl-intel-greater-than-4GB-buffer-required"


def aot_devices(oneapi: tuple[int, int] | None) -> tuple[str, ...]:
    return AOT_DEVICES + (("cri",) if oneapi is not None and oneapi >= CRI_SINCE else ())


def sycl_flags(oneapi: tuple[int, int] | None, units_choose_targets: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(compile options, link options) of an XPU variant for oneAPI release `oneapi`. A kernel
    whose units pass their own -fsycl-targets keeps them: no default targets are added."""
    if units_choose_targets:
        return SYCL_FLAGS + SYCL_COMPILE_ONLY, SYCL_FLAGS
    device = f"-device {','.join(aot_devices(oneapi))} -options '{AOT_OPTIONS}'"
    backend = "SHELL:" + shlex.join(["-Xsycl-target-backend=spir64_gen", device])
    return SYCL_FLAGS + SYCL_COMPILE_ONLY + (SYCL_TARGETS,), SYCL_FLAGS + ("--offload-compress", SYCL_TARGETS, backend)


ICPX_MISSING = "icpx not found on PATH (install Intel oneAPI DPC++/C++ Compiler and source its setvars.sh)"


def icpx_path() -> str | None:
    return shutil.which("icpx")


@functools.cache
def icpx_version(icpx: str) -> tuple[int, int] | None:
    """(year, minor) from `icpx --version` ("Intel(R) oneAPI DPC++/C++ Compiler 2025.2.0 (...)")."""
    line = tool_version(icpx)
    m = re.search(r"(\d{4})\.(\d+)\.\d+", line or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


class XpuBackend(Backend):
    name = "xpu"
    macro = "XPU_KERNEL"
    tool = "icpx"
    install = "the Intel oneAPI DPC++/C++ Compiler (icpx) of a oneAPI release torch ships, then source its setvars.sh"

    def target(self, manifest: Manifest | None, env: BuildEnv) -> Variant | Unavailable:
        icpx = icpx_path()
        if icpx is None:
            return Unavailable(self.name, ICPX_MISSING)
        version = xpu_version(env.xpu) if env.xpu else None
        if version is None:
            what = f"reports XPU version '{env.xpu}'" if env.xpu else "is not an XPU build"
            return Unavailable(
                self.name,
                f"the build environment's torch {env.torch_version} {what}; XPU variants need an "
                "XPU torch (pip install torch --index-url https://download.pytorch.org/whl/xpu)",
            )
        have = icpx_version(icpx)
        if have is None:
            return Unavailable(self.name, f"{icpx} --version did not report a oneAPI release")
        if have[0] != version[0]:
            return Unavailable(
                self.name,
                f"icpx is oneAPI {have[0]}.{have[1]} but torch {env.torch_version} is built with oneAPI "
                f"{version[0]}.{version[1]}; icpx and torch must share the oneAPI year (libsycl's ABI)",
            )
        return env_target(manifest, self.name, env, version)

    def toolchain(self) -> Toolchain:
        path = icpx_path()
        if path is None:
            return Toolchain(self.tool, missing=ICPX_MISSING)
        return Toolchain(self.tool, path, dotted(icpx_version(path)), tool_version(path))

    def toolchain_ids(self) -> tuple[str, ...]:
        icpx = icpx_path()
        version = tool_version(icpx) if icpx else None
        return (version,) if version else ()

    def compile_spec(self, job) -> CompileSpec:
        manifest, env = job.manifest, job.env
        groups = [binding_group(manifest, CXX_SUFFIXES)]
        units = manifest.units_for(self.name)
        own_targets = any(f.startswith("-fsycl-targets") for u in units for f in u.sycl_flags)
        compile_options, link = sycl_flags(job.variant.backend_version, own_targets)
        link_options = list(link)
        for unit in units:
            flags = unit.cxx_flags + unit.sycl_flags
            groups.append(unit_group(manifest, unit, CXX_SUFFIXES, flags))
            sycl = unit_group(manifest, unit, SYCL_SUFFIXES, SYCL_SOURCE_FLAGS + flags)
            groups.append(sycl and dataclasses.replace(sycl, language="CXX"))
            if unit.sycl_flags:
                # SHELL: keeps the group whole; CMake de-duplicates link options one by
                # one, which would merge the second `-Xs` of a unit into the first.
                link_options.append("SHELL:" + shlex.join(unit.sycl_flags))
        return torch_spec(
            job, self.macro, ("CXX",), groups,
            # USE_XPU as well, as kernel-builder defines it for XPU builds.
            definitions=("USE_XPU",),
            options=("-O3", *compile_options),
            link_libraries=("c10_xpu", "torch_xpu"),
            link_options=tuple(dict.fromkeys(link_options)),
            cache={"CMAKE_CXX_COMPILER": icpx_path() or "icpx", "CMAKE_CXX_STANDARD": cxx_standard(env)},
        )
