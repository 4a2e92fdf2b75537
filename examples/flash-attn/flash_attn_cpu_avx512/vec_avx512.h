// The SIMD policy of the AVX-512 units: one zmm register of 16 floats.
// Only the AVX-512 units include this (their cxx-flags enable the ISA); the
// interface is vec_portable.h's.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "flash_attn_cpu/exp2_poly.h"

namespace flash_attn {
namespace cpu {
namespace {

struct VecAvx512 {
  static constexpr int W = 16;
  using F = __m512;

  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F load(const float *p) { return _mm512_loadu_ps(p); }
  static void store(float *p, F a) { _mm512_storeu_ps(p, a); }
  static F iota() {
    return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F abs(F a) { return _mm512_abs_ps(a); }
  static float hmax(F a) { return _mm512_reduce_max_ps(a); }
  static float hsum(F a) { return _mm512_reduce_add_ps(a); }
  static F keep_first(F a, int64_t n, float fill) {
    const __mmask16 keep = n <= 0 ? 0 : n >= W ? 0xffff : static_cast<__mmask16>((1u << n) - 1u);
    return _mm512_mask_blend_ps(keep, _mm512_set1_ps(fill), a);
  }
  // dst[c * dst_ld + r] = src[r * src_ld + c] for r, c < 16, in registers.
  static void transpose16(const float *src, int64_t src_ld, float *dst, int64_t dst_ld) {
    __m512 r[16], t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * src_ld);
    // Interleave the 32-bit elements of row pairs, then 64-bit pairs of those:
    // each 128-bit lane now holds a 4 x 4 block, transposed.
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 16; i += 4) {
      const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
      const __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
      r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
      r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
      r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
      r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    // Then whole 128-bit lanes: even and odd lanes of rows 4 apart, then 8 apart.
#pragma GCC unroll 2
    for (int h = 0; h < 16; h += 8) {
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        t[h + i] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0x88);
        t[h + i + 4] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0xdd);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
      r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + i * dst_ld, r[i]);
  }
  // 2^x for x <= 0 as vec_portable.h computes it; vscalefps applies 2^n.
  static F exp2(F x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-126.0f));
    const F n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const F f = _mm512_sub_ps(x, n);
    F p = _mm512_set1_ps(kExp2Poly[0]);
#pragma GCC unroll 8
    for (int c = 1; c < 6; ++c) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExp2Poly[c]));
    return _mm512_scalef_ps(p, n);
  }
};

}  // namespace
}  // namespace cpu
}  // namespace flash_attn
