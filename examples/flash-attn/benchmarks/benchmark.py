"""flash-attn's workloads for `kernels benchmark` (kernels.benchmark.Benchmark): run them on a
build with `kbuild bench examples/flash-attn`. flash_attn_func on (batch, seqlen, heads,
head_dim) tensors, kept in `self.out`; `verify_<workload>` is F.scaled_dot_product_attention on
the same inputs, compared with it and timed for the speedup column. compare_sdpa.py is the
fuller comparison (shapes, dtypes, backward)."""

import torch
import torch.nn.functional as F

from kernels.benchmark import Benchmark

BATCH, SEQLEN, HEADS, HEAD_DIM = 1, 512, 8, 64


def sdpa(q, k, v, causal):
    # SDPA takes (batch, heads, seqlen, head_dim)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return out.transpose(1, 2)


class FlashAttnBenchmark(Benchmark):
    seed = 0

    def setup(self):
        shape = (BATCH, SEQLEN, HEADS, HEAD_DIM)
        self.q, self.k, self.v = (torch.randn(shape, device=self.device) for _ in range(3))

    def benchmark_causal(self):
        self.out = self.kernel.flash_attn_func(self.q, self.k, self.v, causal=True)

    def verify_causal(self) -> torch.Tensor:
        return sdpa(self.q, self.k, self.v, causal=True)

    def benchmark_full(self):
        self.out = self.kernel.flash_attn_func(self.q, self.k, self.v)

    def verify_full(self) -> torch.Tensor:
        return sdpa(self.q, self.k, self.v, causal=False)
