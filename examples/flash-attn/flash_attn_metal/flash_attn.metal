// The forward on Apple GPUs: one thread per (query, head, sequence), fp32
// math, the online softmax of the CPU and CUDA kernels (running max m and sum
// l in the log2 domain, the output rescaled when the max grows). Straight
// from device memory, no tiling: complete and simple rather than fast.
#include <metal_stdlib>

#include "metal_params.h"

using namespace metal;

template <typename T, int D>
kernel void flash_attn_fwd(device const T *q [[buffer(0)]],
                           device const T *k [[buffer(1)]],
                           device const T *v [[buffer(2)]],
                           device T *out [[buffer(3)]],
                           device float *lse [[buffer(4)]],
                           device const int *cu_seqlens_q [[buffer(5)]],
                           device const int *cu_seqlens_k [[buffer(6)]],
                           device const float *alibi_slopes [[buffer(7)]],
                           constant FlashAttnMetalParams &p [[buffer(8)]],
                           uint3 gid [[thread_position_in_grid]]) {
  const int i = int(gid.x), h = int(gid.y), b = int(gid.z);
  if (h >= p.heads || b >= p.batch) {
    return;
  }
  const int row0_q = p.varlen ? cu_seqlens_q[b] : 0;
  const int row0_k = p.varlen ? cu_seqlens_k[b] : 0;
  const int sq = p.varlen ? cu_seqlens_q[b + 1] - row0_q : p.seqlen_q;
  const int sk = p.varlen ? cu_seqlens_k[b + 1] - row0_k : p.seqlen_k;
  if (i >= sq) {
    return;
  }
  const int kvh = h / (p.heads / p.heads_k);
  const int off = sk - sq;  // query i sees keys j <= i + off when causal
  const int kend = p.causal ? clamp(i + off + 1, 0, sk) : sk;
  const float scale2 = p.softmax_scale * M_LOG2E_F;
  const float slope2 = p.has_alibi ? alibi_slopes[b * p.alibi_batch_stride + h] * M_LOG2E_F : 0.0f;

  device const T *qr = q + b * p.q_batch_stride + (row0_q + i) * p.q_row_stride + h * p.q_head_stride;
  float qv[D];
  float acc[D];
  for (int d = 0; d < D; ++d) {
    qv[d] = float(qr[d]);
    acc[d] = 0.0f;
  }
  float m = -INFINITY;
  float l = 0.0f;
  for (int j = 0; j < kend; ++j) {
    device const T *kr = k + b * p.k_batch_stride + (row0_k + j) * p.k_row_stride + kvh * p.k_head_stride;
    device const T *vr = v + b * p.v_batch_stride + (row0_k + j) * p.v_row_stride + kvh * p.v_head_stride;
    float dot = 0.0f;
    for (int d = 0; d < D; ++d) {
      dot += qv[d] * float(kr[d]);
    }
    const float s = dot * scale2 - slope2 * fabs(float(i + off - j));
    if (s > m) {  // a new max: rescale what the row has so far (0 the first time)
      const float alpha = exp2(m - s);
      l *= alpha;
      for (int d = 0; d < D; ++d) {
        acc[d] *= alpha;
      }
      m = s;
    }
    const float pj = exp2(s - m);
    l += pj;
    for (int d = 0; d < D; ++d) {
      acc[d] += pj * float(vr[d]);
    }
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  device T *orow = out + b * p.o_batch_stride + (row0_q + i) * p.o_row_stride + h * p.o_head_stride;
  for (int d = 0; d < D; ++d) {
    orow[d] = T(acc[d] * inv);
  }
  lse[b * p.lse_batch_stride + h * p.lse_head_stride + row0_q + i] =
      l > 0.0f ? (m + log2(l)) * M_LN2_F : INFINITY;
}

#define INSTANTIATE(DTYPE, T, D)                                        \
  template [[host_name(FLASH_ATTN_METAL_KERNEL(DTYPE, D))]] [[kernel]] \
  decltype(flash_attn_fwd<T, D>) flash_attn_fwd<T, D>;

INSTANTIATE(float, float, 64)
INSTANTIATE(float, float, 128)
INSTANTIATE(half, half, 64)
INSTANTIATE(half, half, 128)
#if __METAL_VERSION__ >= 310
INSTANTIATE(bfloat, bfloat, 64)
INSTANTIATE(bfloat, bfloat, 128)
#endif
