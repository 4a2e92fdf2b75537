"""Metal: `xcrun metal` to a metallib, then Objective-C++ with -framework Metal (macOS only)."""

from __future__ import annotations

import shutil

from kernel_builder.backends import Unavailable, tool_version
from kernel_builder.backends.common import host_platform
from kernel_builder.envs import BuildEnv
from kernel_builder.manifest import Manifest
from kernel_builder.variants import Variant


class MetalBackend:
    name = "metal"
    macro = "METAL_KERNEL"

    def target(self, manifest: Manifest | None, env: BuildEnv) -> Variant | Unavailable:
        _, os_ = host_platform()
        if os_ != "darwin" or shutil.which("xcrun") is None:
            return Unavailable(self.name, "Metal needs macOS with Xcode (xcrun metal not found)")
        return Unavailable(self.name, "Metal compilation is not in this kbuild release yet")

    def metadata(self, job) -> dict:
        return {}

    def toolchain_ids(self) -> tuple[str, ...]:
        version = tool_version("xcrun")
        return (version,) if version else ()

    def compile_spec(self, job):
        raise NotImplementedError("Metal compile specs arrive with the Metal backend")
