"""TPU, Neuron and CANN: backends with no compiler in kbuild, whose kernels are [torch-noarch]
Python (kernel-builder's relu-tpu and relu-nki, kernels-community's ragged-dot-tpu), built as
one `torch-<backend>` variant each. A compiled variant is never planned for them (build.toml
refuses [torch] with these backends); the hooks say so if one is asked for anyway."""

from __future__ import annotations

from kernel_builder.compile.backends.base import Backend, Toolchain, Unavailable
from kernel_builder.errors import UsageError
from kernel_builder.variants import Variant


class NoarchOnlyBackend(Backend):
    compiles = False
    tool = "(none)"
    install = "nothing: declare [torch-noarch] in build.toml, its kernels are Python"

    def _why(self) -> str:
        return f"{self.name} kernels are Python only ([torch-noarch]); kbuild compiles nothing for {self.name}"

    def target(self, manifest, env) -> Variant | Unavailable:
        return Unavailable(self.name, self._why())

    def toolchain(self) -> Toolchain:
        return Toolchain(self.tool, missing=self._why())

    def toolchain_ids(self) -> tuple[str, ...]:
        return ()

    def compile_spec(self, job):
        raise UsageError(self._why())


class TpuBackend(NoarchOnlyBackend):
    name = "tpu"
    macro = "TPU_KERNEL"


class NeuronBackend(NoarchOnlyBackend):
    name = "neuron"
    macro = "NEURON_KERNEL"


class CannBackend(NoarchOnlyBackend):
    name = "cann"
    macro = "CANN_KERNEL"
