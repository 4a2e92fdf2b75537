// The bf16 forward with AVX512_BF16 dot products (this unit's cxx-flags add
// -mavx512bf16; the glue only calls it after a CPUID check). vdpbf16ps
// multiplies pairs of bf16 values and accumulates in fp32, twice the work of
// an fp32 FMA per instruction:
//   S = Q K^T pairs along head_dim: Q rows stay bf16, K blocks are packed as
//     [D/2][kBlockK][2] so that one zmm holds the pairs of 16 keys;
//   O += P V pairs along keys: P is rounded to bf16 (as flash-attn 2 does on
//     GPUs before its P V mma), V blocks are packed as [kBlockK/2][D][2].
// The online softmax, masking and bookkeeping are kernel.h's, in fp32.
#include "flash_attn_cpu_avx512/vec_avx512.h"
#include "flash_attn_cpu/kernel.h"

namespace flash_attn {
namespace cpu {
namespace {

inline __m512bh load_pairs(const uint16_t *p) {
  return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p));
}
// The bf16 pair at p (two consecutive elements) in every 32-bit lane.
inline __m512bh broadcast_pair(const uint16_t *p) {
  int32_t pair;
  __builtin_memcpy(&pair, p, sizeof(pair));
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
}

template <class V, int D>
struct Bf16DotTiles {
  static constexpr int kD = D;
  using QElem = uint16_t;
  using KElem = uint16_t;
  using VElem = uint16_t;
  using PElem = uint16_t;
  static constexpr int64_t kKBlock = int64_t(D) * kBlockK;
  static constexpr int64_t kVBlock = int64_t(D) * kBlockK;
  using VBlock = const uint16_t *;  // always packed
  static constexpr int NV = kCols / 16;

  // The glue routes only bf16 inputs here: rows are copied as they are.
  static void load_q(const FwdParams &p, int64_t b, int64_t h, int64_t i0, int64_t rows, uint16_t *q) {
    const uint16_t *src = static_cast<const uint16_t *>(p.q);
    for (int64_t r = 0; r < rows; ++r) {
      const uint16_t *row = src + p.q_offset(b, i0 + r, h);
      for (int d = 0; d < D; ++d) q[r * D + d] = row[d];
    }
  }
  static void pack_k(const FwdParams &p, int64_t b, int64_t kvh, int64_t j0, int64_t kn, uint16_t *kt) {
    const uint16_t *src = static_cast<const uint16_t *>(p.k);
    for (int64_t j = 0; j < kBlockK; ++j) {
      const uint16_t *row = j < kn ? src + p.k_offset(b, j0 + j, kvh) : nullptr;
      for (int d = 0; d < D; ++d) kt[(d >> 1) * (2 * kBlockK) + 2 * j + (d & 1)] = row ? row[d] : 0;
    }
  }
  static bool packs_v(const FwdParams &) { return true; }
  static VBlock v_block(const FwdParams &, const uint16_t *packed, int64_t, int64_t, int64_t) { return packed; }
  static void pack_v(const FwdParams &p, int64_t b, int64_t kvh, int64_t j0, int64_t kn, uint16_t *vb) {
    const uint16_t *src = static_cast<const uint16_t *>(p.v);
    for (int64_t j = 0; j < kBlockK; ++j) {
      const uint16_t *row = j < kn ? src + p.v_offset(b, j0 + j, kvh) : nullptr;
      for (int d = 0; d < D; ++d) vb[(j >> 1) * (2 * D) + 2 * d + (j & 1)] = row ? row[d] : 0;
    }
  }
  static void store_p(uint16_t *dst, __m512 p) {
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(p)));
  }

  // s[MR][kBlockK] = q[MR][D] kt, 64 columns (4 zmm per row) at a time.
  template <int MR>
  static void qk_tile(const uint16_t *q, const uint16_t *kt, float *s) {
    for (int c0 = 0; c0 < kBlockK; c0 += kCols) {
      __m512 acc[MR][NV];
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
      for (int pi = 0; pi < D / 2; ++pi) {
        __m512bh kb[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) kb[v] = load_pairs(kt + (pi * kBlockK + c0 + v * 16) * 2);
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
          const __m512bh a = broadcast_pair(q + r * D + 2 * pi);
#pragma GCC unroll 8
          for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, kb[v]);
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) _mm512_storeu_ps(s + r * kBlockK + c0 + v * 16, acc[r][v]);
    }
  }

  // o[MR][D] = alpha[r] * o + pr[MR][:2 pairs] vb, 64 columns at a time.
  template <int MR>
  static void pv_tile(const uint16_t *pr, const uint16_t *vb, int64_t pairs, float *o, const float *alpha) {
    for (int c0 = 0; c0 < D; c0 += kCols) {
      __m512 acc[MR][NV];
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v)
          acc[r][v] = _mm512_mul_ps(_mm512_loadu_ps(o + r * D + c0 + v * 16), _mm512_set1_ps(alpha[r]));
      for (int64_t pj = 0; pj < pairs; ++pj) {
        __m512bh vv[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) vv[v] = load_pairs(vb + (pj * D + c0 + v * 16) * 2);
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
          const __m512bh a = broadcast_pair(pr + r * kBlockK + 2 * pj);
#pragma GCC unroll 8
          for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, vv[v]);
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) _mm512_storeu_ps(o + r * D + c0 + v * 16, acc[r][v]);
    }
  }

  static void qk(int rows, const uint16_t *q, const uint16_t *kt, float *s) {
    switch (rows) {
      case 6: qk_tile<6>(q, kt, s); break;
      case 5: qk_tile<5>(q, kt, s); break;
      case 4: qk_tile<4>(q, kt, s); break;
      case 3: qk_tile<3>(q, kt, s); break;
      case 2: qk_tile<2>(q, kt, s); break;
      default: qk_tile<1>(q, kt, s); break;
    }
  }
  // Keys past kn hold P = 0 and zero V rows, so an odd kn rounds up safely.
  static void pv(int rows, const uint16_t *pr, const uint16_t *vb, int64_t kn, float *o, const float *alpha) {
    const int64_t pairs = (kn + 1) / 2;
    switch (rows) {
      case 6: pv_tile<6>(pr, vb, pairs, o, alpha); break;
      case 5: pv_tile<5>(pr, vb, pairs, o, alpha); break;
      case 4: pv_tile<4>(pr, vb, pairs, o, alpha); break;
      case 3: pv_tile<3>(pr, vb, pairs, o, alpha); break;
      case 2: pv_tile<2>(pr, vb, pairs, o, alpha); break;
      default: pv_tile<1>(pr, vb, pairs, o, alpha); break;
    }
  }
};

}  // namespace

namespace avx512_bf16 {

// Forward only; the backward runs avx512's fp32 tiles.
using K = Entry<VecAvx512, Bf16DotTiles>;
extern const Kernels kernels = {"avx512_bf16", &K::fwd_workspace, &K::fwd, nullptr, nullptr};

}  // namespace avx512_bf16
}  // namespace cpu
}  // namespace flash_attn
