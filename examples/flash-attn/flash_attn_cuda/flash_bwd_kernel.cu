// The backward's kernels and launcher (flash-attn 2's backward), in fp32.
// Like flash_fwd_kernel.cu this file includes no torch header, so kbuild
// compile-checks its device code for every rocm-arch with hipcc alone; it
// uses no warp intrinsics or tensor cores, so NVIDIA and AMD share one path.
//
// The glue (flash_attn_cuda.cpp, prepare_backward) hands over fp32 copies of
// q, k, v and dout, the forward's lse and delta_i = sum_d dO_id * O_id. For a
// query i and a key j of one (sequence, head):
//   P_ij  = exp(scale * q_i . k_j + bias_ij - lse_i)   (0 where masked, and
//           for rows with lse = +inf: they saw no key, their gradients are 0)
//   dP_ij = dO_i . v_j
//   dS_ij = P_ij * (dP_ij - delta_i) * scale
//   dV_j += P_ij dO_i,  dK_j += dS_ij q_i,  dQ_i += dS_ij k_j
// with the forward's masks: bottom-right causal (key j seen by query i iff
// j <= i + len_k - len_q) and ALiBi bias -slope * |i + len_k - len_q - j|.
//
// Two kernels, each output row with one owner (deterministic, no atomics):
//   flash_bwd_dk_dv: a block owns kBlockN keys of one (sequence, kv head),
//     walks the query tiles of every q head of its GQA group that can see
//     them, and writes dK and dV (summed over the group);
//   flash_bwd_dq: a block owns BlockM<D> queries of one (sequence, head),
//     walks the key tiles up to the causal limit, and writes dQ.
// Both recompute the P and dS tile from tiles of q, dO, k and v in shared
// memory (rows padded by one float against bank conflicts).
#include "flash_attn_cuda/flash_bwd_kernel.h"

namespace flash_attn {
namespace {

constexpr int kThreads = 256;  // threads per block
constexpr int kBlockN = 32;    // keys per tile
// Queries per tile: the shared tiles stay under 48 KiB of static shared memory.
template <int D>
constexpr int block_m() {
  return D == 64 ? 16 : 8;
}
constexpr float kLog2e = 1.4426950408889634f;

__host__ __device__ __forceinline__ int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The tiles one block works on. Rows of q/dout/k/v have D + 1 floats.
template <int D>
struct Tiles {
  static constexpr int kBM = block_m<D>();
  static constexpr int kLd = D + 1;
  float q[kBM * kLd];
  float dout[kBM * kLd];
  float k[kBlockN * kLd];
  float v[kBlockN * kLd];
  float p[kBM * kBlockN];   // P of the tile
  float ds[kBM * kBlockN];  // dS of the tile, times softmax_scale
  float lse2[kBM];          // lse * log2(e) per query row, +inf for rows to skip
  float delta[kBM];
};

// Rows [r0, r0 + R) of one (sequence, head) into a tile (rows of kLd floats);
// `base` points at row 0 of the sequence in that head, rows have `stride`
// elements; rows at or past `rows` are zero-filled.
template <int D, int R>
__device__ __forceinline__ void load_rows(float *dst, const float *base, int64_t stride, int64_t r0,
                                          int64_t rows) {
  constexpr int kLd = D + 1;
  for (int e = threadIdx.x; e < R * D; e += kThreads) {
    const int r = e / D, d = e % D;
    dst[r * kLd + d] = r0 + r < rows ? base[(r0 + r) * stride + d] : 0.0f;
  }
}

// lse (in log2 units) and delta of query rows [i0, i0 + kBM) of (b, h).
template <int D>
__device__ __forceinline__ void load_row_stats(Tiles<D> &t, const BwdParams &bp, int64_t b, int64_t h,
                                               int64_t i0, int64_t sq) {
  const FwdParams &p = bp.fwd;
  for (int r = threadIdx.x; r < Tiles<D>::kBM; r += kThreads) {
    const int64_t i = i0 + r;
    const bool in = i < sq;
    t.lse2[r] = in ? p.lse[p.lse_offset(b, i, h)] * kLog2e : INFINITY;
    t.delta[r] = in ? bp.delta[p.lse_offset(b, i, h)] : 0.0f;
  }
}

// The masks and the bias of one (sequence, head), as the forward applies them.
struct Mask {
  float scale2, slope2;  // softmax_scale * log2(e), ALiBi slope * log2(e)
  int64_t sq, sk, off;   // queries and keys of the sequence; off = sk - sq
  bool causal;

  // The score of query i and key j in the log2 domain, -inf where masked.
  __device__ __forceinline__ float operator()(float qk, int64_t i, int64_t j) const {
    if (i >= sq || j >= sk || (causal && j > i + off)) return -INFINITY;
    return qk * scale2 - slope2 * fabsf(static_cast<float>(i + off - j));
  }
};

__device__ __forceinline__ Mask mask_for(const FwdParams &p, int64_t b, int64_t h) {
  Mask m;
  m.scale2 = p.softmax_scale * kLog2e;
  m.slope2 = p.alibi_slope(b, h) * kLog2e;
  m.sq = p.len_q(b);
  m.sk = p.len_k(b);
  m.off = m.sk - m.sq;
  m.causal = p.causal;
  return m;
}

// P and dS of query rows [i0, i0 + kBM) against keys [j0, j0 + kBlockN), from
// the tiles in shared memory (the caller synchronizes before and after).
template <int D>
__device__ __forceinline__ void p_and_ds(Tiles<D> &t, const Mask &mask, float softmax_scale, int64_t i0,
                                         int64_t j0) {
  constexpr int kLd = D + 1;
  for (int e = threadIdx.x; e < Tiles<D>::kBM * kBlockN; e += kThreads) {
    const int r = e / kBlockN, c = e % kBlockN;  // a warp: one row, 32 keys
    float pv = 0.0f, dsv = 0.0f;
    const float lse2 = t.lse2[r];
    if (lse2 != INFINITY) {
      const float *qr = t.q + r * kLd, *dor = t.dout + r * kLd;
      const float *kc = t.k + c * kLd, *vc = t.v + c * kLd;
      float qk = 0.0f, dp = 0.0f;
      for (int d = 0; d < D; ++d) {
        qk += qr[d] * kc[d];
        dp += dor[d] * vc[d];
      }
      const float s = mask(qk, i0 + r, j0 + c);
      if (s != -INFINITY) {
        pv = exp2f(s - lse2);
        dsv = pv * (dp - t.delta[r]) * softmax_scale;
      }
    }
    t.p[e] = pv;  // e == r * kBlockN + c
    t.ds[e] = dsv;
  }
}

// dK and dV of keys [j0, j0 + kBlockN) of (sequence blockIdx.y, kv head
// blockIdx.z). Each thread accumulates kPer (key, column) elements.
template <int D>
__global__ void __launch_bounds__(kThreads) flash_bwd_dk_dv(const BwdParams bp) {
  using T = Tiles<D>;
  constexpr int kBM = T::kBM, kLd = T::kLd, kPer = kBlockN * D / kThreads;
  static_assert(kBlockN * D % kThreads == 0, "whole elements per thread");
  __shared__ T t;

  const FwdParams &p = bp.fwd;
  const int64_t b = blockIdx.y, kvh = blockIdx.z;
  const int64_t j0 = int64_t(blockIdx.x) * kBlockN;
  const int64_t sq = p.len_q(b), sk = p.len_k(b);
  if (j0 >= sk) return;  // varlen: this sequence has fewer keys than max_seqlen_k

  const float *kbase = static_cast<const float *>(p.k) + p.k_offset(b, 0, kvh);
  const float *vbase = static_cast<const float *>(p.v) + p.v_offset(b, 0, kvh);
  load_rows<D, kBlockN>(t.k, kbase, p.k_row_stride, j0, sk);
  load_rows<D, kBlockN>(t.v, vbase, p.v_row_stride, j0, sk);

  float dk[kPer], dv[kPer];
#pragma unroll
  for (int x = 0; x < kPer; ++x) dk[x] = 0.0f, dv[x] = 0.0f;

  // Causal: query i sees key j0 first when i + off >= j0.
  const int64_t off = sk - sq;
  const int64_t i_begin = p.causal && j0 - off > 0 ? j0 - off : 0;
  const int64_t group = p.heads / p.heads_k;
  for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
    const Mask mask = mask_for(p, b, h);
    const float *qbase = static_cast<const float *>(p.q) + p.q_offset(b, 0, h);
    const float *obase = bp.dout + p.o_offset(b, 0, h);
    for (int64_t i0 = i_begin; i0 < sq; i0 += kBM) {
      __syncthreads();  // the previous tile is consumed
      load_rows<D, kBM>(t.q, qbase, p.q_row_stride, i0, sq);
      load_rows<D, kBM>(t.dout, obase, p.o_row_stride, i0, sq);
      load_row_stats(t, bp, b, h, i0, sq);
      __syncthreads();
      p_and_ds(t, mask, p.softmax_scale, i0, j0);
      __syncthreads();
      // dV += P^T dO, dK += dS^T Q; a warp: one key, 32 consecutive columns.
#pragma unroll
      for (int x = 0; x < kPer; ++x) {
        const int e = threadIdx.x + x * kThreads;
        const int c = e / D, d = e % D;
        float av = 0.0f, ak = 0.0f;
        for (int r = 0; r < kBM; ++r) {
          av += t.p[r * kBlockN + c] * t.dout[r * kLd + d];
          ak += t.ds[r * kBlockN + c] * t.q[r * kLd + d];
        }
        dv[x] += av;
        dk[x] += ak;
      }
    }
  }

#pragma unroll
  for (int x = 0; x < kPer; ++x) {
    const int e = threadIdx.x + x * kThreads;
    const int c = e / D, d = e % D;
    if (j0 + c >= sk) continue;
    bp.dk[p.k_offset(b, j0 + c, kvh) + d] = dk[x];
    bp.dv[p.v_offset(b, j0 + c, kvh) + d] = dv[x];
  }
}

// dQ of queries [i0, i0 + kBM) of (sequence blockIdx.y, head blockIdx.z).
template <int D>
__global__ void __launch_bounds__(kThreads) flash_bwd_dq(const BwdParams bp) {
  using T = Tiles<D>;
  constexpr int kBM = T::kBM, kLd = T::kLd, kPer = kBM * D / kThreads;
  static_assert(kBM * D % kThreads == 0, "whole elements per thread");
  __shared__ T t;

  const FwdParams &p = bp.fwd;
  const int64_t b = blockIdx.y, h = blockIdx.z;
  const int64_t i0 = int64_t(blockIdx.x) * kBM;
  const int64_t sq = p.len_q(b), sk = p.len_k(b);
  if (i0 >= sq) return;  // varlen: this sequence has fewer queries than max_seqlen_q
  const int64_t kvh = h / (p.heads / p.heads_k);
  const Mask mask = mask_for(p, b, h);

  const float *qbase = static_cast<const float *>(p.q) + p.q_offset(b, 0, h);
  const float *obase = bp.dout + p.o_offset(b, 0, h);
  load_rows<D, kBM>(t.q, qbase, p.q_row_stride, i0, sq);
  load_rows<D, kBM>(t.dout, obase, p.o_row_stride, i0, sq);
  load_row_stats(t, bp, b, h, i0, sq);

  float dq[kPer];
#pragma unroll
  for (int x = 0; x < kPer; ++x) dq[x] = 0.0f;

  // Causal: the last query of the tile, i0 + kBM - 1, sees keys j < i0 + kBM + off.
  int64_t kend = sk;
  if (p.causal) {
    const int64_t e = i0 + kBM + mask.off;
    kend = e < 0 ? 0 : (e < sk ? e : sk);
  }
  const float *kbase = static_cast<const float *>(p.k) + p.k_offset(b, 0, kvh);
  const float *vbase = static_cast<const float *>(p.v) + p.v_offset(b, 0, kvh);
  for (int64_t j0 = 0; j0 < kend; j0 += kBlockN) {
    __syncthreads();  // the previous tile is consumed
    load_rows<D, kBlockN>(t.k, kbase, p.k_row_stride, j0, sk);
    load_rows<D, kBlockN>(t.v, vbase, p.v_row_stride, j0, sk);
    __syncthreads();
    p_and_ds(t, mask, p.softmax_scale, i0, j0);
    __syncthreads();
    // dQ += dS K; a warp: one query, 32 consecutive columns.
#pragma unroll
    for (int x = 0; x < kPer; ++x) {
      const int e = threadIdx.x + x * kThreads;
      const int r = e / D, d = e % D;
      float a = 0.0f;
      for (int c = 0; c < kBlockN; ++c) a += t.ds[r * kBlockN + c] * t.k[c * kLd + d];
      dq[x] += a;
    }
  }

#pragma unroll
  for (int x = 0; x < kPer; ++x) {
    const int e = threadIdx.x + x * kThreads;
    const int r = e / D, d = e % D;
    if (i0 + r < sq) bp.dq[p.q_offset(b, i0 + r, h) + d] = dq[x];
  }
}

template <int D>
gpu::error_t launch(const BwdParams &bp, gpu::stream_t stream) {
  const FwdParams &p = bp.fwd;
  if (p.seqlen_k > 0) {
    const dim3 grid(static_cast<unsigned>(cdiv(p.seqlen_k, kBlockN)), static_cast<unsigned>(p.batch),
                    static_cast<unsigned>(p.heads_k));
    flash_bwd_dk_dv<D><<<grid, kThreads, 0, stream>>>(bp);
    const gpu::error_t e = gpu::last_error();
    if (e != gpu::success) return e;
  }
  if (p.seqlen_q > 0) {
    const dim3 grid(static_cast<unsigned>(cdiv(p.seqlen_q, block_m<D>())), static_cast<unsigned>(p.batch),
                    static_cast<unsigned>(p.heads));
    flash_bwd_dq<D><<<grid, kThreads, 0, stream>>>(bp);
    return gpu::last_error();
  }
  return gpu::success;
}

}  // namespace

gpu::error_t flash_bwd(const BwdParams &p, gpu::stream_t stream) {
  if (p.fwd.batch == 0 || p.fwd.heads == 0) return gpu::success;
  return p.fwd.head_dim == 64 ? launch<64>(p, stream) : launch<128>(p, stream);
}

}  // namespace flash_attn
