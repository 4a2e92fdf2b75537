// relu's device side, callable without torch: relu.cpp (the torch glue) calls
// it, relu_kernel.cu defines it.
#pragma once

#include <cstdint>

#include "gpu_runtime.h"

// out[i] = max(in[i], 0) for i < n, both contiguous, on `stream`; returns the
// launch status. Defined for T = float, double, gpu::half and gpu::bfloat16.
template <typename T>
gpu::error_t relu_launch(T *out, const T *in, int64_t n, gpu::stream_t stream);
