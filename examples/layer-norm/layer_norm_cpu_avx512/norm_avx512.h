// Row kernels of the AVX-512 units (norms forward and backward, silu_and_mul).
//
// Torch-free on purpose: this header is included by the AVX-512 translation
// units (compiled with AVX-512 flags) and by the portable unit that decides at
// run time whether these may be called. Two builds of the same kernels:
// - layer_norm_avx512::      needs AVX512F/BW/VL and FMA
//   (layer_norm_ops::avx512_enabled());
// - layer_norm_avx512_bf16:: additionally AVX512_BF16, for native fp32 -> bf16
//   rounding (layer_norm_ops::avx512_bf16_enabled()).
// Never call them on a CPU that lacks those features. Threading is done by the
// caller: each call handles a range of rows.
#pragma once

#include <cstdint>

namespace layer_norm_avx512 {

// Element types, passed as raw bits: 16-bit values are computed in fp32.
enum class DType : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

// One forward norm over rows [row_begin, row_end). Strides are in elements;
// every row is contiguous. Optional pointers are nullptr when absent.
struct NormFwdParams {
  DType dtype;
  bool rms;  // RMSNorm (LlamaRMSNorm numerics) instead of LayerNorm
  int64_t n;  // row length
  const void* input;
  int64_t input_stride;
  const void* residual;  // s = input + residual, rounded to dtype
  int64_t residual_stride;
  void* residual_out;  // receives s (given iff residual is)
  int64_t residual_out_stride;
  void* out;
  int64_t out_stride;
  const float* weight;  // n values converted to fp32, or nullptr
  const float* bias;    // n values converted to fp32, or nullptr (LayerNorm)
  float* mean;          // per row, or nullptr (RMSNorm)
  float* rstd;          // per row
  float eps;
  // Write `out` and `residual_out` with non-temporal stores where their rows
  // are aligned for them (for outputs larger than the caches, where reading
  // the destination lines first is wasted traffic).
  bool stream_out;
};

// `scratch` holds n floats (the row in fp32, reused between the sweeps).
void norm_fwd_rows(const NormFwdParams& p, int64_t row_begin, int64_t row_end,
                   float* scratch);

// The backward over rows [row_begin, row_end) (see layer_norm_cpu.cpp for the
// formulas). `input` is the s the forward normalized.
struct NormBwdParams {
  DType dtype;
  bool rms;
  int64_t n;
  const void* grad_out;
  int64_t grad_out_stride;
  const void* grad_residual_out;  // added to grad_input, or nullptr
  int64_t grad_residual_out_stride;
  const void* input;
  int64_t input_stride;
  const float* mean;  // LayerNorm only
  const float* rstd;
  const float* weight;  // n values converted to fp32, or nullptr
  void* grad_input;
  int64_t grad_input_stride;
};

// `scratch` holds 2 * n floats. grad_weight_part / grad_bias_part (n floats
// each, or nullptr) receive the sums over these rows, added to what they hold.
void norm_bwd_rows(const NormBwdParams& p, int64_t row_begin, int64_t row_end,
                   float* scratch, float* grad_weight_part, float* grad_bias_part);

// out[r * out_stride + j] = silu(in[r * in_stride + j]) * in[r * in_stride + d + j]
// for rows r in [0, rows) and j in [0, d); stream_out as in NormFwdParams.
void silu_and_mul_rows(DType dtype, void* out, const void* in, int64_t rows,
                       int64_t d, int64_t out_stride, int64_t in_stride,
                       bool stream_out);

}  // namespace layer_norm_avx512

namespace layer_norm_avx512_bf16 {

using layer_norm_avx512::DType;
using layer_norm_avx512::NormBwdParams;
using layer_norm_avx512::NormFwdParams;

void norm_fwd_rows(const NormFwdParams& p, int64_t row_begin, int64_t row_end,
                   float* scratch);
void norm_bwd_rows(const NormBwdParams& p, int64_t row_begin, int64_t row_end,
                   float* scratch, float* grad_weight_part, float* grad_bias_part);
void silu_and_mul_rows(DType dtype, void* out, const void* in, int64_t rows,
                       int64_t d, int64_t out_stride, int64_t in_stride,
                       bool stream_out);

}  // namespace layer_norm_avx512_bf16
