// The forward's device side, callable without torch: flash_attn_cuda.cpp
// (the torch glue) calls it, flash_fwd_kernel.cu defines it.
#pragma once

// The runtime header first: params.h needs its __host__ __device__.
#include "flash_attn_cuda/gpu_runtime.h"
#include "flash_attn_common/params.h"

namespace flash_attn {

// Launches the forward of `p` on `stream` and returns the launch status.
// p.dtype is bf16 or fp16 and p.head_dim 64 or 128 (the glue checks); q, k
// and v rows start on 16-byte boundaries (their pointers and batch/row/head
// strides are multiples of 8 elements); out is contiguous.
gpu::error_t flash_fwd(const FwdParams &p, gpu::stream_t stream);

}  // namespace flash_attn
