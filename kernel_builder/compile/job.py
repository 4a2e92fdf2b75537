"""One build job: one kernel, one variant, one environment; what every compile stage is handed."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from kernel_builder.environments.probe import BuildEnv
from kernel_builder.kernel.manifest import Manifest
from kernel_builder.kernel.provenance import GitState
from kernel_builder.variants import Kind, Variant


@dataclass(frozen=True)
class BuildJob:
    manifest: Manifest
    env: BuildEnv | None  # None until the build finds or creates its managed environment
    variant: Variant
    backend: str
    kernel_id: str  # kernel.identity: 7 hex digits of what the build reads, `_dirty` when uncommitted
    source: GitState | None
    out_dir: Path  # the build/ folder; the job writes out_dir/<variant>/
    work_dir: Path  # the generated CMake project and its build tree (in the cache)
    # --cuda-arch: the only CUDA architectures to compile (a development build); () for all
    # of the kernel's, and always () for other backends.
    cuda_arch: tuple[str, ...] = ()

    def with_env(self, env: BuildEnv) -> "BuildJob":
        return replace(self, env=env)

    @property
    def ops_name(self) -> str:
        """The hash-suffixed op namespace: `_<name>_<backend>_<id>`."""
        return f"_{self.manifest.python_name}_{self.backend}_{self.kernel_id}"

    @property
    def library_name(self) -> str:
        return f"{self.ops_name}.abi3.so"

    @property
    def compiled(self) -> bool:
        return self.variant.kind is not Kind.NOARCH

    @property
    def dest(self) -> Path:
        return self.out_dir / self.variant.name

    @property
    def log_file(self) -> Path:
        return self.work_dir / "build.log"
