"""relu's workloads for `kernels benchmark` (kernels.benchmark.Benchmark): run them on a build
with `kbuild bench examples/relu`. `verify_<workload>` is torch's result, compared with
`self.out` and timed for the speedup column."""

import torch

from kernels.benchmark import Benchmark


class ReluBenchmark(Benchmark):
    seed = 0

    def setup(self):
        self.x = torch.randn(1024, 1024, device=self.device)
        self.out = torch.empty_like(self.x)

    def benchmark_fp32(self):
        self.kernel.relu(self.x, out=self.out)

    def verify_fp32(self) -> torch.Tensor:
        return torch.relu(self.x)

    def setup_bf16(self):
        self.x = torch.randn(1024, 1024, device=self.device, dtype=torch.bfloat16)
        self.out = torch.empty_like(self.x)

    def benchmark_bf16(self):
        self.kernel.relu(self.x, out=self.out)

    def verify_bf16(self) -> torch.Tensor:
        return torch.relu(self.x)
