// Row kernels of the AVX-512 unit.
//
// This header is deliberately torch-free: it is included both by the AVX-512
// translation unit (compiled with -mavx512f/-mavx512bw/-mavx512vl/-mfma) and by
// the portable unit that decides at run time whether these may be called.
// Never call these functions unless swiglu::cpu::avx512_enabled() is true.
#pragma once

#include <cstdint>

namespace swiglu {
namespace avx512 {

// For every row r in [0, rows):
//   gate = in + r * in_row_stride          (d elements)
//   up   = in + r * in_row_stride + d      (d elements)
//   out[r * out_row_stride + j] = silu(gate[j]) * up[j]
// Strides are in elements; the last dimension must be contiguous.
// 16-bit types are passed as raw bit patterns and computed in fp32.
void silu_and_mul_f32(float* out, const float* in, int64_t rows, int64_t d,
                      int64_t out_row_stride, int64_t in_row_stride);
void silu_and_mul_bf16(uint16_t* out, const uint16_t* in, int64_t rows,
                       int64_t d, int64_t out_row_stride,
                       int64_t in_row_stride);
void silu_and_mul_f16(uint16_t* out, const uint16_t* in, int64_t rows,
                      int64_t d, int64_t out_row_stride, int64_t in_row_stride);

}  // namespace avx512
}  // namespace swiglu
