// LayerNorm / RMSNorm forward and backward, and silu_and_mul, for Apple GPUs.
//
// The algorithm follows the CUDA kernels (layer_norm_cuda/norm_kernels.cu)
// in their loop form: one threadgroup per row; sweep 1 reads the row once
// (forming s = x + residual, rounded to the element type, when a residual is
// fused) and the threadgroup reduces sum(s) or sum(s^2); LayerNorm then
// corrects mean and variance with sums of s - mean (the corrected two-pass
// algorithm); the last sweep writes the output. The later sweeps read the row
// again, from the GPU's cache. All arithmetic is fp32; RMSNorm rounds the
// normalized value to the element type before the weight multiply, as
// LlamaRMSNorm does.
//
// Backward: a row kernel writes grad_input, a column kernel sums grad_weight
// and grad_bias over the rows (one thread per column: deterministic, no
// workspace).

#include <metal_stdlib>

#include "metal_params.h"

using namespace metal;

constant constexpr uint kMaxSimdGroups = 32;

// Sum over the threadgroup; every thread gets the result. The threadgroup size
// is a multiple of the SIMD width (the host rounds it up).
inline float group_sum(float v, threadgroup float *shared, uint lane, uint group, uint groups) {
  v = simd_sum(v);
  if (lane == 0) {
    shared[group] = v;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float t = lane < groups ? shared[lane] : 0.0f;
  t = simd_sum(t);
  threadgroup_barrier(mem_flags::mem_threadgroup);  // `shared` is reused next
  return t;
}

// v rounded to T and widened again.
template <typename T>
inline float round_to(float v) {
  return float(T(v));
}

// ---- forward ---------------------------------------------------------------------

template <typename T>
kernel void norm_fwd(device const T *input [[buffer(LN_FWD_INPUT)]],
                     device const T *residual [[buffer(LN_FWD_RESIDUAL)]],
                     device T *residual_out [[buffer(LN_FWD_RESIDUAL_OUT)]],
                     device T *out [[buffer(LN_FWD_OUT)]],
                     device const T *weight [[buffer(LN_FWD_WEIGHT)]],
                     device const T *bias [[buffer(LN_FWD_BIAS)]],
                     device float *mean_out [[buffer(LN_FWD_MEAN)]],
                     device float *rstd_out [[buffer(LN_FWD_RSTD)]],
                     constant NormParams &p [[buffer(LN_FWD_PARAMS)]],
                     uint row [[threadgroup_position_in_grid]],
                     uint tid [[thread_position_in_threadgroup]],
                     uint threads [[threads_per_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]],
                     uint group [[simdgroup_index_in_threadgroup]],
                     uint groups [[simdgroups_per_threadgroup]]) {
  threadgroup float shared[kMaxSimdGroups];
  if (row >= p.rows) {
    return;  // uniform over the threadgroup
  }
  const bool rms = (p.flags & LN_FLAG_RMS) != 0;
  const bool has_weight = (p.flags & LN_FLAG_WEIGHT) != 0;
  const bool has_bias = (p.flags & LN_FLAG_BIAS) != 0;
  const bool has_residual = (p.flags & LN_FLAG_RESIDUAL) != 0;
  const uint n = p.n;
  const float inv_n = 1.0f / float(n);

  device const T *x = input + ulong(row) * p.input_stride;
  device const T *res = residual + ulong(row) * p.residual_stride;
  device T *res_out = residual_out + ulong(row) * p.residual_out_stride;
  // What the later sweeps read: s (residual_out, written by this same thread
  // at the same index, or the input).
  device const T *s = has_residual ? (device const T *)res_out : x;

  float acc = 0.0f;
  for (uint j = tid; j < n; j += threads) {
    float v = float(x[j]);
    if (has_residual) {
      const T rounded = T(v + float(res[j]));
      res_out[j] = rounded;
      v = float(rounded);
    }
    acc += rms ? v * v : v;
  }
  const float total = group_sum(acc, shared, lane, group, groups);
  float mean = 0.0f;
  float var;
  if (rms) {
    var = total * inv_n;
  } else {
    mean = total * inv_n;
    float acc_d = 0.0f;
    float acc_d2 = 0.0f;
    for (uint j = tid; j < n; j += threads) {
      const float d = float(s[j]) - mean;
      acc_d += d;
      acc_d2 += d * d;
    }
    const float shift = group_sum(acc_d, shared, lane, group, groups) * inv_n;
    mean += shift;
    var = max(group_sum(acc_d2, shared, lane, group, groups) * inv_n - shift * shift, 0.0f);
  }
  const float rstd = 1.0f / sqrt(var + p.eps);
  if (tid == 0) {
    if (!rms) {
      mean_out[row] = mean;
    }
    rstd_out[row] = rstd;
  }

  device T *y = out + ulong(row) * p.out_stride;
  for (uint j = tid; j < n; j += threads) {
    const float v = float(s[j]);
    float o;
    if (rms) {
      o = round_to<T>(v * rstd);  // LlamaRMSNorm: weight * normed.to(dtype)
      if (has_weight) {
        o *= float(weight[j]);
      }
    } else {
      o = (v - mean) * rstd;
      if (has_weight) {
        o *= float(weight[j]);
      }
      if (has_bias) {
        o += float(bias[j]);
      }
    }
    y[j] = T(o);
  }
}

// ---- backward ----------------------------------------------------------------------
//
// xhat = (s - mean) * rstd (LayerNorm) or s * rstd (RMSNorm), g = grad_out * weight:
//   grad_s = rstd * (g - mean(g) - xhat * mean(g * xhat))   (LayerNorm; RMSNorm
//   without the mean(g) term), plus grad_residual_out.

template <typename T>
kernel void norm_bwd_rows(device const T *grad_out [[buffer(LN_BWD_GRAD_OUT)]],
                          device const T *grad_res_out [[buffer(LN_BWD_GRAD_RESIDUAL_OUT)]],
                          device const T *input [[buffer(LN_BWD_INPUT)]],
                          device const float *mean_in [[buffer(LN_BWD_MEAN)]],
                          device const float *rstd_in [[buffer(LN_BWD_RSTD)]],
                          device const T *weight [[buffer(LN_BWD_WEIGHT)]],
                          device T *grad_input [[buffer(LN_BWD_GRAD_INPUT)]],
                          constant NormParams &p [[buffer(LN_BWD_PARAMS)]],
                          uint row [[threadgroup_position_in_grid]],
                          uint tid [[thread_position_in_threadgroup]],
                          uint threads [[threads_per_threadgroup]],
                          uint lane [[thread_index_in_simdgroup]],
                          uint group [[simdgroup_index_in_threadgroup]],
                          uint groups [[simdgroups_per_threadgroup]]) {
  threadgroup float shared[kMaxSimdGroups];
  if (row >= p.rows) {
    return;
  }
  const bool rms = (p.flags & LN_FLAG_RMS) != 0;
  const bool has_weight = (p.flags & LN_FLAG_WEIGHT) != 0;
  const bool has_dres = (p.flags & LN_FLAG_RESIDUAL) != 0;
  const uint n = p.n;
  const float inv_n = 1.0f / float(n);
  // Strides: input_stride (input), residual_out_stride (grad_out),
  // residual_stride (grad_residual_out), out_stride (grad_input).
  device const T *x = input + ulong(row) * p.input_stride;
  device const T *dy = grad_out + ulong(row) * p.residual_out_stride;
  const float mean = rms ? 0.0f : mean_in[row];
  const float rstd = rstd_in[row];

  float sum_g = 0.0f;
  float sum_gx = 0.0f;
  for (uint j = tid; j < n; j += threads) {
    const float xhat = (float(x[j]) - mean) * rstd;
    const float g = has_weight ? float(dy[j]) * float(weight[j]) : float(dy[j]);
    sum_g += g;
    sum_gx += g * xhat;
  }
  const float c1 = group_sum(sum_gx, shared, lane, group, groups) * inv_n;
  const float c2 = rms ? 0.0f : group_sum(sum_g, shared, lane, group, groups) * inv_n;

  device T *dx = grad_input + ulong(row) * p.out_stride;
  device const T *dres = grad_res_out + ulong(row) * p.residual_stride;
  for (uint j = tid; j < n; j += threads) {
    const float xhat = (float(x[j]) - mean) * rstd;
    const float g = has_weight ? float(dy[j]) * float(weight[j]) : float(dy[j]);
    float v = rstd * (g - c2 - xhat * c1);
    if (has_dres) {
      v += float(dres[j]);
    }
    dx[j] = T(v);
  }
}

// grad_weight[j] = sum over rows of grad_out * xhat (RMSNorm: xhat rounded to
// T, which is what the weight multiplied); grad_bias[j] = sum of grad_out.
template <typename T>
kernel void norm_bwd_columns(device const T *grad_out [[buffer(LN_BWD_GRAD_OUT)]],
                             device const T *input [[buffer(LN_BWD_INPUT)]],
                             device const float *mean_in [[buffer(LN_BWD_MEAN)]],
                             device const float *rstd_in [[buffer(LN_BWD_RSTD)]],
                             device T *grad_weight [[buffer(LN_BWD_GRAD_WEIGHT)]],
                             device T *grad_bias [[buffer(LN_BWD_GRAD_BIAS)]],
                             constant NormParams &p [[buffer(LN_BWD_PARAMS)]],
                             uint j [[thread_position_in_grid]]) {
  if (j >= p.n) {
    return;
  }
  const bool rms = (p.flags & LN_FLAG_RMS) != 0;
  const bool want_dw = (p.flags & LN_FLAG_WEIGHT) != 0;
  const bool want_db = (p.flags & LN_FLAG_BIAS) != 0;
  float dw = 0.0f;
  float db = 0.0f;
  for (uint r = 0; r < p.rows; ++r) {
    const float d = float(grad_out[ulong(r) * p.residual_out_stride + j]);
    const float xhat = (float(input[ulong(r) * p.input_stride + j]) - (rms ? 0.0f : mean_in[r])) * rstd_in[r];
    dw += d * (rms ? round_to<T>(xhat) : xhat);
    db += d;
  }
  if (want_dw) {
    grad_weight[j] = T(dw);
  }
  if (want_db) {
    grad_bias[j] = T(db);
  }
}

// ---- silu_and_mul ------------------------------------------------------------------

template <typename T>
kernel void silu_and_mul(device const T *input [[buffer(0)]],
                         device T *out [[buffer(1)]],
                         constant SiluParams &p [[buffer(2)]],
                         uint2 pos [[thread_position_in_grid]]) {
  const uint j = pos.x;
  const uint row = pos.y;
  if (j >= p.d || row >= p.rows) {
    return;
  }
  device const T *gate = input + ulong(row) * p.in_stride;
  const float g = float(gate[j]);
  const float u = float(gate[p.d + j]);
  // sigmoid from e = exp(-|g|): no overflow for large |g|.
  const float e = exp(-fabs(g));
  const float inv = 1.0f / (1.0f + e);
  const float sigmoid = g < 0.0f ? e * inv : inv;
  out[ulong(row) * p.out_stride + j] = T(g * sigmoid * u);
}

// ---- instantiations ----------------------------------------------------------------

#define INSTANTIATE(T, NAME)                                                              \
  template [[host_name("norm_fwd_" NAME)]] [[kernel]] decltype(norm_fwd<T>) norm_fwd<T>;  \
  template [[host_name("norm_bwd_rows_" NAME)]] [[kernel]] decltype(norm_bwd_rows<T>)     \
      norm_bwd_rows<T>;                                                                   \
  template [[host_name("norm_bwd_columns_" NAME)]] [[kernel]] decltype(norm_bwd_columns<T>) \
      norm_bwd_columns<T>;                                                                \
  template [[host_name("silu_and_mul_" NAME)]] [[kernel]] decltype(silu_and_mul<T>)       \
      silu_and_mul<T>;

INSTANTIATE(float, "float")
INSTANTIATE(half, "half")
#if __METAL_VERSION__ >= 310
INSTANTIATE(bfloat, "bfloat")
#endif
