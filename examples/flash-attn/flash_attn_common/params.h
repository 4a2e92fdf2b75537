// What every backend's kernels get: raw pointers, element strides and sizes of
// one attention call, with no torch type in sight. The torch glue of each
// backend fills these structs (flash_attn_common/torch_args.h); the CPU
// kernels, the CUDA/HIP .cu and the SYCL kernel read them. Metal cannot take
// 64-bit pointers in a struct, so its glue copies the sizes into its own
// argument block (flash_attn_metal/metal_params.h).
//
// Layouts (the head_dim axis is always contiguous):
//   batched: q (batch, seqlen_q, heads, d), k/v (batch, seqlen_k, heads_k, d),
//            lse (batch, heads, seqlen_q)
//   varlen:  q (total_q, heads, d), k/v (total_k, heads_k, d), sequence b
//            holds rows cu_seqlens_q[b] .. cu_seqlens_q[b+1] (k alike),
//            lse (heads, total_q)
// Both are addressed the same way: element (b, i, h) of q sits at
//   b * q_batch_stride + (row0_q(b) + i) * q_row_stride + h * q_head_stride
// with q_batch_stride = 0 and row0_q(b) = cu_seqlens_q[b] for varlen, and
// row0_q(b) = 0 for batched calls.
#pragma once

#include <cstdint>

// Under nvcc/hipcc the runtime header (gpu_runtime.h) comes first and
// defines __host__ and __device__.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define FLASH_ATTN_HD __host__ __device__ inline
#else
#define FLASH_ATTN_HD inline
#endif

namespace flash_attn {

// The element type of q, k, v and out (and of dout in the backward).
enum class DType : int32_t { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

// The head sizes the kernels are built for (each backend instantiates these).
constexpr int kHeadDims[] = {64, 128};

struct FwdParams {
  const void *q = nullptr;
  const void *k = nullptr;
  const void *v = nullptr;
  void *out = nullptr;
  float *lse = nullptr;  // fp32, see the layouts above

  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  int64_t lse_batch_stride = 0, lse_head_stride = 0;  // rows are contiguous

  // Varlen calls: batch + 1 offsets each (int32, on the kernels' device).
  // nullptr for batched calls.
  const int32_t *cu_seqlens_q = nullptr;
  const int32_t *cu_seqlens_k = nullptr;

  int32_t batch = 0, heads = 0, heads_k = 0, head_dim = 0;
  // Batched: every sequence's length. Varlen: the max_seqlen_q/k the caller
  // passed (an upper bound that sizes GPU grids).
  int64_t seqlen_q = 0, seqlen_k = 0;

  // ALiBi: slope of (batch b, head h) at b * alibi_batch_stride + h, fp32;
  // the bias -slope * |i + seqlen_k - seqlen_q - j| is added to the scaled
  // score of query i and key j (flash-attn 2). nullptr: no bias.
  const float *alibi_slopes = nullptr;
  int64_t alibi_batch_stride = 0;

  float softmax_scale = 1.0f;
  // Causal masks are aligned to the bottom right: query i sees the keys
  // j <= i + seqlen_k - seqlen_q of its sequence (flash-attn 2).
  bool causal = false;
  DType dtype = DType::kFloat32;

  FLASH_ATTN_HD bool varlen() const { return cu_seqlens_q != nullptr; }
  FLASH_ATTN_HD int64_t row0_q(int64_t b) const {
    return varlen() ? cu_seqlens_q[b] : 0;
  }
  FLASH_ATTN_HD int64_t row0_k(int64_t b) const {
    return varlen() ? cu_seqlens_k[b] : 0;
  }
  FLASH_ATTN_HD int64_t len_q(int64_t b) const {
    return varlen() ? cu_seqlens_q[b + 1] - cu_seqlens_q[b] : seqlen_q;
  }
  FLASH_ATTN_HD int64_t len_k(int64_t b) const {
    return varlen() ? cu_seqlens_k[b + 1] - cu_seqlens_k[b] : seqlen_k;
  }
  // Element offsets of row i / key j of sequence b in head h.
  FLASH_ATTN_HD int64_t q_offset(int64_t b, int64_t i, int64_t h) const {
    return b * q_batch_stride + (row0_q(b) + i) * q_row_stride + h * q_head_stride;
  }
  FLASH_ATTN_HD int64_t k_offset(int64_t b, int64_t j, int64_t h) const {
    return b * k_batch_stride + (row0_k(b) + j) * k_row_stride + h * k_head_stride;
  }
  FLASH_ATTN_HD int64_t v_offset(int64_t b, int64_t j, int64_t h) const {
    return b * v_batch_stride + (row0_k(b) + j) * v_row_stride + h * v_head_stride;
  }
  FLASH_ATTN_HD int64_t o_offset(int64_t b, int64_t i, int64_t h) const {
    return b * o_batch_stride + (row0_q(b) + i) * o_row_stride + h * o_head_stride;
  }
  FLASH_ATTN_HD int64_t lse_offset(int64_t b, int64_t i, int64_t h) const {
    return b * lse_batch_stride + h * lse_head_stride + row0_q(b) + i;
  }
  FLASH_ATTN_HD float alibi_slope(int64_t b, int64_t h) const {
    return alibi_slopes ? alibi_slopes[b * alibi_batch_stride + h] : 0.0f;
  }
};

// The backward reads q, k, v and dout as fp32 (the glue converts other
// dtypes), the forward's lse, and delta = rowsum(dout * out) (fp32, laid out
// like lse), and writes fp32 dq, dk, dv laid out like q, k, v. `fwd` carries
// the shapes, the q/k/v pointers and strides, and the options.
struct BwdParams {
  FwdParams fwd;
  const float *dout = nullptr;  // strides of fwd.o_* (laid out like out)
  const float *delta = nullptr;  // strides of fwd.lse_*
  float *dq = nullptr;  // strides of fwd.q_*
  float *dk = nullptr;  // strides of fwd.k_*
  float *dv = nullptr;  // strides of fwd.v_*
};

}  // namespace flash_attn
