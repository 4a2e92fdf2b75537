// The forward's kernels and launcher. This file includes no torch header, so
// kbuild compile-checks its device code for every rocm-arch even where only
// hipcc (no ROCm torch) is installed.
//
// The algorithm is the CPU kernels' (flash_attn_cpu/kernel.h): a block of
// kBlockM queries of one (sequence, head) walks the key blocks of kBlockN
// keys up to the causal limit, keeps a running max m and sum l per row in the
// log2 domain, rescales its output by alpha = exp2(m_old - m_new) and adds
// P V. Queries that see no key get 0 and lse = +inf.
//
// NVIDIA (sm_80+): tensor cores via mma.sync.m16n8k16 (bf16/fp16 in, fp32
// accumulation), 4 warps of 16 query rows each. S = Q K^T takes Q fragments
// from registers and K from shared memory; the S accumulators become the A
// fragments of P V directly (flash-attn 2's register layout), rounded to the
// input type; V fragments pair two keys of one column, read from shared
// memory as two 16-bit loads.
//
// AMD (the ROCm build, wavefront 64): a portable path without matrix cores,
// one thread per query row over K/V tiles in shared memory, fp32 math.
#include "flash_attn_cuda/flash_fwd_kernel.h"

namespace flash_attn {
namespace {

constexpr int kBlockM = 64;  // queries per thread block
constexpr int kBlockN = 64;  // keys per tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__host__ __device__ __forceinline__ int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The scaled score of query i and key j in the log2 domain, -inf if masked.
struct Scorer {
  float scale2, slope2;  // softmax_scale * log2(e), ALiBi slope * log2(e)
  int64_t sk, off;       // keys of the sequence; query i sees j <= i + off (causal)
  bool causal;

  __device__ __forceinline__ float operator()(float qk, int64_t i, int64_t j) const {
    if (j >= sk || (causal && j > i + off)) return -INFINITY;
    return qk * scale2 - slope2 * fabsf(static_cast<float>(i + off - j));
  }
};

__device__ __forceinline__ Scorer scorer_for(const FwdParams &p, int64_t b, int64_t h) {
  Scorer s;
  s.scale2 = p.softmax_scale * kLog2e;
  s.slope2 = p.alibi_slope(b, h) * kLog2e;
  s.sk = p.len_k(b);
  s.off = s.sk - p.len_q(b);
  s.causal = p.causal;
  return s;
}

// Keys [0, kend) can be seen by queries [m0, m0 + kBlockM) of a sequence.
__device__ __forceinline__ int64_t key_end(const FwdParams &p, const Scorer &s, int64_t m0) {
  if (!p.causal) return s.sk;
  const int64_t e = m0 + kBlockM + s.off;
  return e < 0 ? 0 : (e < s.sk ? e : s.sk);
}

// lse (natural log) of a row from its max m (log2 domain) and sum l.
__device__ __forceinline__ float row_lse(float m, float l) {
  return l > 0.0f ? (m + log2f(l)) * kLn2 : INFINITY;
}

template <bool kBf16>
__device__ __forceinline__ float to_float(uint16_t bits) {
  return kBf16 ? gpu::bf16_bits_to_float(bits) : gpu::half_bits_to_float(bits);
}
template <bool kBf16>
__device__ __forceinline__ uint16_t from_float(float f) {
  return kBf16 ? gpu::float_to_bf16_bits(f) : gpu::float_to_half_bits(f);
}

// Rows [n0, n0 + kBlockN) of a (sequence, kv head) of k or v (row stride
// `stride` elements from `base`) into shared memory rows of `ld` elements,
// 16 bytes per thread and step; rows at or past `rows` are zero-filled so that
// they contribute nothing (P is 0 there, and 0 * garbage could be NaN).
template <int D>
__device__ __forceinline__ void load_tile(uint16_t *dst, int ld, const uint16_t *base, int64_t stride,
                                          int64_t n0, int64_t rows) {
  constexpr int kChunks = D / 8;
  for (int c = threadIdx.x; c < kBlockN * kChunks; c += blockDim.x) {
    const int r = c / kChunks, cc = c % kChunks;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (n0 + r < rows) v = *reinterpret_cast<const uint4 *>(base + (n0 + r) * stride + cc * 8);
    *reinterpret_cast<uint4 *>(dst + r * ld + cc * 8) = v;
  }
}

#if !defined(__HIP_PLATFORM_AMD__)

// ---- NVIDIA: tensor cores ------------------------------------------------------

constexpr int kWarps = kBlockM / 16;

template <bool kBf16>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#else
  // Built only for sm_80+ (build.toml's cuda-capabilities); this keeps any
  // other target from miscompiling silently.
  __trap();
#endif
}

// Two values as one 32-bit register of the input type, the first in the low half.
template <bool kBf16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  return static_cast<uint32_t>(from_float<kBf16>(lo)) | (static_cast<uint32_t>(from_float<kBf16>(hi)) << 16);
}
__device__ __forceinline__ uint32_t pack_bits(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}
__device__ __forceinline__ uint32_t load_u32(const uint16_t *p) {
  return *reinterpret_cast<const uint32_t *>(p);
}

// mma.m16n8k16 fragments, lane = 4 * g + t (g = lane / 4, t = lane % 4):
//   A (16 x 16, rows x k): a0 = (g, 2t..2t+1), a1 = (g + 8, 2t..), a2 = (g, 2t + 8..),
//     a3 = (g + 8, 2t + 8..);
//   B (16 x 8, k x cols): b0 = (2t..2t+1, g), b1 = (2t + 8.., g);
//   C (16 x 8): c0, c1 = (g, 2t..2t+1), c2, c3 = (g + 8, 2t..2t+1).
template <bool kBf16, int D>
__global__ void __launch_bounds__(kWarps * 32) flash_fwd_mma(const FwdParams p) {
  constexpr int kLd = D + 8;  // shared row stride: rows 16-byte aligned, fewer bank conflicts
  constexpr int kSteps = D / 16;
  constexpr int kTiles = D / 8;
  __shared__ __align__(16) uint16_t ks[kBlockN * kLd];
  __shared__ __align__(16) uint16_t vs[kBlockN * kLd];

  const int64_t b = blockIdx.y, h = blockIdx.z;
  const int64_t m0 = int64_t(blockIdx.x) * kBlockM;
  const int64_t sq = p.len_q(b);
  if (m0 >= sq) return;  // varlen: this sequence is shorter than max_seqlen_q
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t kvh = h / (p.heads / p.heads_k);
  const Scorer score = scorer_for(p, b, h);
  const int64_t kend = key_end(p, score, m0);
  const int64_t rows[2] = {m0 + warp * 16 + g, m0 + warp * 16 + g + 8};  // this thread's rows

  // Q as A fragments, straight from global memory (zeros past the sequence).
  const uint16_t *q = static_cast<const uint16_t *>(p.q);
  uint32_t qf[kSteps][4];
#pragma unroll
  for (int kc = 0; kc < kSteps; ++kc) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const bool in = rows[r] < sq;
      const uint16_t *row = q + (in ? p.q_offset(b, rows[r], h) : 0) + kc * 16 + 2 * t;
      qf[kc][r] = in ? load_u32(row) : 0u;
      qf[kc][r + 2] = in ? load_u32(row + 8) : 0u;
    }
  }

  float o[kTiles][4];
#pragma unroll
  for (int dt = 0; dt < kTiles; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  const uint16_t *kbase = static_cast<const uint16_t *>(p.k) + p.k_offset(b, 0, kvh);
  const uint16_t *vbase = static_cast<const uint16_t *>(p.v) + p.v_offset(b, 0, kvh);
  for (int64_t n0 = 0; n0 < kend; n0 += kBlockN) {
    __syncthreads();  // every warp is done with the previous tiles
    load_tile<D>(ks, kLd, kbase, p.k_row_stride, n0, score.sk);
    load_tile<D>(vs, kLd, vbase, p.v_row_stride, n0, score.sk);
    __syncthreads();

    // S = Q K^T: 8 tiles of 8 keys; B fragments are pairs along head_dim.
    float s[kBlockN / 8][4];
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
      for (int kc = 0; kc < kSteps; ++kc) {
        const uint16_t *krow = ks + (nt * 8 + g) * kLd + kc * 16 + 2 * t;
        const uint32_t kf[2] = {load_u32(krow), load_u32(krow + 8)};
        mma16816<kBf16>(s[nt], qf[kc], kf);
      }
    }

    // Online softmax; a row's 64 scores are spread over the 4 lanes of its group.
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        s[nt][e] = score(s[nt][e], rows[r], n0 + nt * 8 + 2 * t + (e & 1));
        mx[r] = fmaxf(mx[r], s[nt][e]);
      }
    }
    float mu[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      mu[r] = mx[r] == -INFINITY ? 0.0f : mx[r];  // a row with nothing seen yet
      const float alpha = exp2f(m[r] - mu[r]);    // 0 for the first keys seen
      l[r] *= alpha;
#pragma unroll
      for (int dt = 0; dt < kTiles; ++dt) o[dt][2 * r] *= alpha, o[dt][2 * r + 1] *= alpha;
      m[r] = mx[r];
    }
    // P as A fragments: key tiles 2kk and 2kk + 1 form the 16 keys of step kk.
    uint32_t pf[kBlockN / 16][4];
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt) {
      const float p0 = exp2f(s[nt][0] - mu[0]), p1 = exp2f(s[nt][1] - mu[0]);
      const float p2 = exp2f(s[nt][2] - mu[1]), p3 = exp2f(s[nt][3] - mu[1]);
      l[0] += p0 + p1;
      l[1] += p2 + p3;
      pf[nt / 2][(nt % 2) * 2] = pack2<kBf16>(p0, p1);
      pf[nt / 2][(nt % 2) * 2 + 1] = pack2<kBf16>(p2, p3);
    }

    // O += P V: B fragments pair two keys of one head_dim column.
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint16_t *v0 = vs + (kk * 16 + 2 * t) * kLd + g;
#pragma unroll
      for (int dt = 0; dt < kTiles; ++dt) {
        const uint16_t *vc = v0 + dt * 8;
        const uint32_t vf[2] = {pack_bits(vc[0], vc[kLd]), pack_bits(vc[8 * kLd], vc[9 * kLd])};
        mma16816<kBf16>(o[dt], pf[kk], vf);
      }
    }
  }

  // The 4 lanes of a group hold partial sums of their rows.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    if (rows[r] >= sq) continue;
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    uint16_t *out = static_cast<uint16_t *>(p.out) + p.o_offset(b, rows[r], h) + 2 * t;
#pragma unroll
    for (int dt = 0; dt < kTiles; ++dt) {
      *reinterpret_cast<uint32_t *>(out + dt * 8) = pack2<kBf16>(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
    }
    if (t == 0) p.lse[p.lse_offset(b, rows[r], h)] = row_lse(m[r], l[r]);
  }
}

template <bool kBf16, int D>
gpu::error_t launch(const FwdParams &p, dim3 grid, gpu::stream_t stream) {
  flash_fwd_mma<kBf16, D><<<grid, kWarps * 32, 0, stream>>>(p);
  return gpu::last_error();
}

#else

// ---- AMD: one thread per query row --------------------------------------------------

template <bool kBf16, int D>
__global__ void __launch_bounds__(kBlockM) flash_fwd_rows(const FwdParams p) {
  __shared__ __align__(16) uint16_t ks[kBlockN * D];
  __shared__ __align__(16) uint16_t vs[kBlockN * D];

  const int64_t b = blockIdx.y, h = blockIdx.z;
  const int64_t m0 = int64_t(blockIdx.x) * kBlockM;
  const int64_t sq = p.len_q(b);
  if (m0 >= sq) return;
  const int64_t i = m0 + threadIdx.x;  // this thread's query
  const bool active = i < sq;
  const int64_t kvh = h / (p.heads / p.heads_k);
  const Scorer score = scorer_for(p, b, h);
  const int64_t kend = key_end(p, score, m0);

  float qv[D], o[D];
  const uint16_t *q = static_cast<const uint16_t *>(p.q) + (active ? p.q_offset(b, i, h) : 0);
  for (int d = 0; d < D; ++d) qv[d] = active ? to_float<kBf16>(q[d]) : 0.0f, o[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  const uint16_t *kbase = static_cast<const uint16_t *>(p.k) + p.k_offset(b, 0, kvh);
  const uint16_t *vbase = static_cast<const uint16_t *>(p.v) + p.v_offset(b, 0, kvh);
  for (int64_t n0 = 0; n0 < kend; n0 += kBlockN) {
    __syncthreads();
    load_tile<D>(ks, D, kbase, p.k_row_stride, n0, score.sk);
    load_tile<D>(vs, D, vbase, p.v_row_stride, n0, score.sk);
    __syncthreads();
    const int n = static_cast<int>(kend - n0 < kBlockN ? kend - n0 : kBlockN);
    for (int j = 0; j < n; ++j) {
      float dot = 0.0f;
      for (int d = 0; d < D; ++d) dot += qv[d] * to_float<kBf16>(ks[j * D + d]);
      const float s = score(dot, i, n0 + j);
      if (s == -INFINITY) continue;
      if (s > m) {  // a new max: rescale what the row has so far
        const float alpha = exp2f(m - s);
        l *= alpha;
        for (int d = 0; d < D; ++d) o[d] *= alpha;
        m = s;
      }
      const float pj = exp2f(s - m);
      l += pj;
      for (int d = 0; d < D; ++d) o[d] += pj * to_float<kBf16>(vs[j * D + d]);
    }
  }
  if (!active) return;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  uint16_t *out = static_cast<uint16_t *>(p.out) + p.o_offset(b, i, h);
  for (int d = 0; d < D; ++d) out[d] = from_float<kBf16>(o[d] * inv);
  p.lse[p.lse_offset(b, i, h)] = row_lse(m, l);
}

template <bool kBf16, int D>
gpu::error_t launch(const FwdParams &p, dim3 grid, gpu::stream_t stream) {
  flash_fwd_rows<kBf16, D><<<grid, kBlockM, 0, stream>>>(p);
  return gpu::last_error();
}

#endif

}  // namespace

gpu::error_t flash_fwd(const FwdParams &p, gpu::stream_t stream) {
  if (p.batch == 0 || p.heads == 0 || p.seqlen_q == 0) return gpu::success;
  const dim3 grid(static_cast<unsigned>(cdiv(p.seqlen_q, kBlockM)), static_cast<unsigned>(p.batch),
                  static_cast<unsigned>(p.heads));
  const bool bf16 = p.dtype == DType::kBFloat16;
  if (p.head_dim == 64) return bf16 ? launch<true, 64>(p, grid, stream) : launch<false, 64>(p, grid, stream);
  return bf16 ? launch<true, 128>(p, grid, stream) : launch<false, 128>(p, grid, stream);
}

}  // namespace flash_attn
