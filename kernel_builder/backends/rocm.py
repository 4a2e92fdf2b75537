"""ROCm: hipcc against a ROCm build of torch (device code objects per `rocm-archs`)."""

from __future__ import annotations

import shutil

from kernel_builder.backends import Unavailable, tool_version
from kernel_builder.envs import BuildEnv
from kernel_builder.manifest import Manifest
from kernel_builder.variants import Variant


class RocmBackend:
    name = "rocm"
    macro = "ROCM_KERNEL"

    def target(self, manifest: Manifest | None, env: BuildEnv) -> Variant | Unavailable:
        if shutil.which("hipcc") is None:
            return Unavailable(self.name, "hipcc not found on PATH (install ROCm/HIP, e.g. apt-get install hipcc)")
        if not env.hip:
            return Unavailable(self.name, f"no ROCm torch in the build environment (it has torch {env.torch_version})")
        return Unavailable(self.name, "ROCm compilation is not in this kbuild release yet")

    def metadata(self, job) -> dict:
        return {}

    def toolchain_ids(self) -> tuple[str, ...]:
        version = tool_version("hipcc")
        return (version,) if version else ()

    def compile_spec(self, job):
        raise NotImplementedError("ROCm compile specs arrive with the ROCm backend")
