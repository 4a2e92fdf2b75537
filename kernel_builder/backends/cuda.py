"""CUDA: nvcc against a CUDA build of torch.

This release finds the toolchain and says why it cannot build here; compiling with nvcc
(`-gencode` per capability) arrives with per-variant build environments."""

from __future__ import annotations

import shutil

from kernel_builder.backends import Unavailable, tool_version
from kernel_builder.envs import BuildEnv
from kernel_builder.manifest import Manifest
from kernel_builder.variants import Variant


class CudaBackend:
    name = "cuda"
    macro = "CUDA_KERNEL"

    def target(self, manifest: Manifest | None, env: BuildEnv) -> Variant | Unavailable:
        if not env.cuda:
            return Unavailable(
                self.name,
                f"the build environment's torch {env.torch_version} is not a CUDA build; "
                "CUDA variants need a CUDA torch (e.g. torch==2.14.1)",
            )
        if shutil.which("nvcc") is None:
            return Unavailable(self.name, "nvcc not found on PATH (install the CUDA toolkit)")
        return Unavailable(self.name, "CUDA compilation is not in this kbuild release yet")

    def toolchain_ids(self) -> tuple[str, ...]:
        version = tool_version("nvcc")
        return (version,) if version else ()

    def compile_spec(self, job):
        raise NotImplementedError("CUDA compile specs arrive with the CUDA backend")
