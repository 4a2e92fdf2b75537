"""layer-norm's workloads for `kernels benchmark` (kernels.benchmark.Benchmark): run them on a
build with `kbuild bench examples/layer-norm`. Each returns a new tensor, as a model's forward
does, kept in `self.out`; `verify_<workload>` is torch's (transformers') computation, compared
with it and timed for the speedup column. compare_eager.py is the fuller comparison."""

import torch
import torch.nn.functional as F

from kernels.benchmark import Benchmark

TOKENS, HIDDEN = 1024, 2048


class LayerNormBenchmark(Benchmark):
    seed = 0

    def setup(self):
        self.x = torch.randn(TOKENS, HIDDEN, device=self.device)
        self.weight = torch.randn(HIDDEN, device=self.device)
        self.bias = torch.randn(HIDDEN, device=self.device)

    def benchmark_layer_norm(self):
        self.out = self.kernel.layer_norm(self.x, self.weight, self.bias, eps=1e-5)

    def verify_layer_norm(self) -> torch.Tensor:
        return F.layer_norm(self.x, (HIDDEN,), self.weight, self.bias, eps=1e-5)

    def benchmark_rms_norm(self):
        self.out = self.kernel.rms_norm(self.x, self.weight, eps=1e-6)

    def verify_rms_norm(self) -> torch.Tensor:
        # LlamaRMSNorm
        return self.weight * (self.x * torch.rsqrt(self.x.pow(2).mean(-1, keepdim=True) + 1e-6))
