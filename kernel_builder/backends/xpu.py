"""XPU: Intel oneAPI `icpx -fsycl` against an XPU build of torch."""

from __future__ import annotations

import shutil

from kernel_builder.backends import Unavailable, tool_version
from kernel_builder.envs import BuildEnv
from kernel_builder.manifest import Manifest
from kernel_builder.variants import Variant


class XpuBackend:
    name = "xpu"
    macro = "XPU_KERNEL"

    def target(self, manifest: Manifest | None, env: BuildEnv) -> Variant | Unavailable:
        if shutil.which("icpx") is None:
            return Unavailable(self.name, "icpx not found on PATH (install Intel oneAPI DPC++/C++)")
        if not env.xpu:
            return Unavailable(self.name, f"no XPU torch in the build environment (it has torch {env.torch_version})")
        return Unavailable(self.name, "XPU compilation is not in this kbuild release yet")

    def metadata(self, job) -> dict:
        return {}

    def toolchain_ids(self) -> tuple[str, ...]:
        version = tool_version("icpx")
        return (version,) if version else ()

    def compile_spec(self, job):
        raise NotImplementedError("XPU compile specs arrive with the XPU backend")
