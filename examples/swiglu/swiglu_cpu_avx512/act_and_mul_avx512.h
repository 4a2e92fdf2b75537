// Row kernels of the AVX-512 unit.
//
// This header is deliberately torch-free: it is included both by the AVX-512
// translation unit (compiled with -mavx512f/-mavx512bw/-mavx512vl/-mfma) and by
// the portable unit that decides at run time whether these may be called.
// Never call these functions unless swiglu::cpu::avx512_enabled() is true.
#pragma once

#include <cstdint>

#include "swiglu_common/activations.h"

namespace swiglu {
namespace avx512 {

// Element types, passed as raw bits: 16-bit types are computed in fp32 and
// rounded once (bf16 and fp16 to nearest even).
enum class DType : int { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

// Strides are in elements; within a row the `cols` elements are contiguous.
// For every row r in [0, rows) and j in [0, cols):
//   out[r * out_stride + j] = act(gate[r * in_stride + j]) * up[r * in_stride + j]
void forward(Activation act, DType dtype, int64_t rows, int64_t cols, void* out,
             int64_t out_stride, const void* gate, const void* up,
             int64_t in_stride);

// With g, u as above and dout = grad_out[r * grad_out_stride + j]:
//   d_gate[r * grad_in_stride + j] = dout * u * act'(g)
//   d_up[r * grad_in_stride + j]   = dout * act(g)
void backward(Activation act, DType dtype, int64_t rows, int64_t cols,
              void* d_gate, void* d_up, int64_t grad_in_stride,
              const void* grad_out, int64_t grad_out_stride, const void* gate,
              const void* up, int64_t in_stride);

}  // namespace avx512
}  // namespace swiglu
