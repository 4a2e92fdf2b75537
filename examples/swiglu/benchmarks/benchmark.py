"""swiglu's workloads for `kernels benchmark` (kernels.benchmark.Benchmark): run them on a build
with `kbuild bench examples/swiglu`. Each op on a (tokens, 2d) batch, the kernel writing into a
preallocated `out`; `verify_<workload>` is the eager composite, compared with `self.out` and
timed for the speedup column. compare_eager.py is the fuller side-by-side comparison."""

import torch
import torch.nn.functional as F

from kernels.benchmark import Benchmark

TOKENS, D = 1024, 2048


class SwigluBenchmark(Benchmark):
    seed = 0

    def setup(self):
        self.x = torch.randn(TOKENS, 2 * D, device=self.device)
        self.out = torch.empty(TOKENS, D, device=self.device)

    def benchmark_silu_and_mul(self):
        self.kernel.silu_and_mul(self.x, out=self.out)

    def verify_silu_and_mul(self) -> torch.Tensor:
        return F.silu(self.x[..., :D]) * self.x[..., D:]

    def benchmark_gelu_and_mul(self):
        self.kernel.gelu_and_mul(self.x, out=self.out)

    def verify_gelu_and_mul(self) -> torch.Tensor:
        return F.gelu(self.x[..., :D]) * self.x[..., D:]

    def benchmark_gelu_tanh_and_mul(self):
        self.kernel.gelu_tanh_and_mul(self.x, out=self.out)

    def verify_gelu_tanh_and_mul(self) -> torch.Tensor:
        return F.gelu(self.x[..., :D], approximate="tanh") * self.x[..., D:]
