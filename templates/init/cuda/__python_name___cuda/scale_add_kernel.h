// scale_add's device side, callable without torch: scale_add.cpp (the torch
// glue) calls it, scale_add_kernel.cu defines it.
#pragma once

#include <cstdint>

#include "gpu_runtime.h"

// out[i] = x[i] + alpha * y[i] for i < n, all contiguous, on `stream`; returns
// the launch status. Defined for T = float, double, gpu::half, gpu::bfloat16.
template <typename T>
gpu::error_t scale_add_launch(T *out, const T *x, const T *y, double alpha, int64_t n, gpu::stream_t stream);
