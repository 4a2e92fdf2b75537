// The device side of the CUDA/ROCm backend, callable without torch: the glue
// (act_and_mul.cpp) calls these launchers, act_and_mul_kernel.cu defines them.
#pragma once

#include <cstdint>

#include "swiglu_common/activations.h"
#include "swiglu_cuda/gpu_runtime.h"

namespace swiglu {

// For rows r < rows and j < d, on `stream`:
//   out[r * out_stride + j] = act(in[r * in_stride + j]) * in[r * in_stride + d + j]
// Strides are in elements, each row contiguous. Returns the launch status.
// Defined for T = float, gpu::half and gpu::bfloat16 (computed in fp32).
template <typename T>
gpu::error_t act_and_mul_launch(Activation act, T* out, const T* in, int64_t rows,
                                int64_t d, int64_t out_stride, int64_t in_stride,
                                gpu::stream_t stream);

// With g, u the two halves of row r of `in` and dout = grad_out[r * grad_out_stride + j]:
//   grad_input[r * grad_input_stride + j]     = dout * u * act'(g)
//   grad_input[r * grad_input_stride + d + j] = dout * act(g)
template <typename T>
gpu::error_t act_and_mul_backward_launch(Activation act, T* grad_input, const T* grad_out,
                                         const T* in, int64_t rows, int64_t d,
                                         int64_t grad_input_stride, int64_t grad_out_stride,
                                         int64_t in_stride, gpu::stream_t stream);

}  // namespace swiglu
