// The backward's device side, callable without torch: flash_attn_cuda.cpp
// (the torch glue) calls it, flash_bwd_kernel.cu defines it.
#pragma once

// The runtime header first: params.h needs its __host__ __device__.
#include "flash_attn_cuda/gpu_runtime.h"
#include "flash_attn_common/params.h"

namespace flash_attn {

// Launches the backward of `p` on `stream` (two kernels: dK/dV, then dQ) and
// returns the first failing launch status. Everything is fp32, as
// prepare_backward (flash_attn_common/torch_args.h) lays it out: p.fwd.q/k/v
// and p.dout, p.delta = rowsum(dout * out) and p.fwd.lse (lse's layout), and
// the outputs p.dq/dk/dv (laid out like q/k/v). p.fwd.head_dim is 64 or 128.
// Every dq row of every sequence and every dk/dv row of every sequence is
// written (zeros where no query sees a key); varlen rows past the last
// sequence are not touched.
gpu::error_t flash_bwd(const BwdParams &p, gpu::stream_t stream);

}  // namespace flash_attn
