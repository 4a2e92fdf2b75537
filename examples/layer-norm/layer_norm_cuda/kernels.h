// The device side of the layer-norm kernel, callable without torch:
// layer_norm.cpp (the torch glue) calls these launchers, norm_kernels.cu and
// silu_and_mul_kernel.cu define them for T = float, gpu::half, gpu::bfloat16.
//
// Strides are in elements between consecutive rows; every row is contiguous.
// Optional pointers are nullptr when absent. Each launcher enqueues its
// kernels on `stream` and returns the launch status.
#pragma once

#include <cstdint>

#include "gpu_runtime.h"

namespace layer_norm_gpu {

template <typename T>
struct NormFwdArgs {
  const T *input;
  int64_t input_stride;
  const T *residual;  // s = input + residual, rounded to T
  int64_t residual_stride;
  T *residual_out;  // receives s; given iff residual is
  int64_t residual_out_stride;
  T *out;
  int64_t out_stride;
  const T *weight;  // n values or nullptr
  const T *bias;    // n values or nullptr (LayerNorm only)
  float *mean;      // one per row, LayerNorm only
  float *rstd;      // one per row
  int64_t rows;
  int64_t n;
  float eps;
  bool rms;  // RMSNorm with LlamaRMSNorm numerics instead of LayerNorm
};

template <typename T>
gpu::error_t norm_fwd_launch(const NormFwdArgs<T> &args, gpu::stream_t stream);

template <typename T>
struct NormBwdArgs {
  const T *grad_out;
  int64_t grad_out_stride;
  const T *grad_residual_out;  // added to grad_input, or nullptr
  int64_t grad_residual_out_stride;
  const T *input;  // the s the forward normalized
  int64_t input_stride;
  const float *mean;  // LayerNorm only
  const float *rstd;
  const T *weight;  // or nullptr
  T *grad_input;
  int64_t grad_input_stride;
  T *grad_weight;  // or nullptr
  T *grad_bias;    // or nullptr (LayerNorm only)
  // Per-block partial sums of grad_weight and grad_bias: blocks * 2 * n
  // floats, blocks = norm_bwd_blocks(rows) (computed once by the caller, who
  // allocates the workspace).
  float *workspace;
  int64_t blocks;
  int64_t rows;
  int64_t n;
  bool rms;
};

// How many thread blocks (= workspace rows) the backward uses for `rows` rows
// on the current device.
int64_t norm_bwd_blocks(int64_t rows);

template <typename T>
gpu::error_t norm_bwd_launch(const NormBwdArgs<T> &args, gpu::stream_t stream);

// out[r * out_stride + j] = silu(in[r * in_stride + j]) * in[r * in_stride + d + j]
template <typename T>
gpu::error_t silu_and_mul_launch(T *out, const T *in, int64_t rows, int64_t d,
                                 int64_t out_stride, int64_t in_stride,
                                 gpu::stream_t stream);

}  // namespace layer_norm_gpu
