// The SIMD policy of the baseline build (flash_attn_cpu/): 16 floats as a
// plain array, every operation a fixed-length loop that the compiler
// vectorizes for whatever the baseline ISA offers (SSE2 on x86-64, NEON on
// aarch64). The same interface as vec_avx512.h, so kernel.h is written once.
#pragma once

#include <cstdint>

#include "flash_attn_cpu/exp2_poly.h"

namespace flash_attn {
namespace cpu {
namespace {

struct VecPortable {
  static constexpr int W = 16;
  struct F {
    float v[W];
  };

  static F zero() { return set1(0.0f); }
  static F set1(float x) {
    F r;
    for (int i = 0; i < W; ++i) r.v[i] = x;
    return r;
  }
  static F load(const float *p) {
    F r;
    for (int i = 0; i < W; ++i) r.v[i] = p[i];
    return r;
  }
  static void store(float *p, const F &a) {
    for (int i = 0; i < W; ++i) p[i] = a.v[i];
  }
  static F iota() {
    F r;
    for (int i = 0; i < W; ++i) r.v[i] = float(i);
    return r;
  }
  static F add(const F &a, const F &b) {
    F r;
    for (int i = 0; i < W; ++i) r.v[i] = a.v[i] + b.v[i];
    return r;
  }
  static F sub(const F &a, const F &b) {
    F r;
    for (int i = 0; i < W; ++i) r.v[i] = a.v[i] - b.v[i];
    return r;
  }
  static F mul(const F &a, const F &b) {
    F r;
    for (int i = 0; i < W; ++i) r.v[i] = a.v[i] * b.v[i];
    return r;
  }
  static F max(const F &a, const F &b) {
    F r;
    for (int i = 0; i < W; ++i) r.v[i] = a.v[i] > b.v[i] ? a.v[i] : b.v[i];
    return r;
  }
  static F fma(const F &a, const F &b, const F &c) {
    F r;
    for (int i = 0; i < W; ++i) r.v[i] = a.v[i] * b.v[i] + c.v[i];
    return r;
  }
  static F abs(const F &a) {
    F r;
    for (int i = 0; i < W; ++i) r.v[i] = a.v[i] < 0.0f ? -a.v[i] : a.v[i];
    return r;
  }
  static float hmax(const F &a) {
    float m = a.v[0];
    for (int i = 1; i < W; ++i) m = a.v[i] > m ? a.v[i] : m;
    return m;
  }
  static float hsum(const F &a) {
    float s = 0.0f;
    for (int i = 0; i < W; ++i) s += a.v[i];
    return s;
  }
  // Lanes n and above become `fill`.
  static F keep_first(const F &a, int64_t n, float fill) {
    F r;
    for (int i = 0; i < W; ++i) r.v[i] = i < n ? a.v[i] : fill;
    return r;
  }
  // dst[c * dst_ld + r] = src[r * src_ld + c] for r, c < W.
  static void transpose16(const float *src, int64_t src_ld, float *dst, int64_t dst_ld) {
    for (int c = 0; c < W; ++c) {
      for (int r = 0; r < W; ++r) dst[c * dst_ld + r] = src[r * src_ld + c];
    }
  }
  // 2^x for x <= 0 (clamped at -126, where the result stays a normal float):
  // x = n + f with |f| <= 1/2, 2^f by exp2_poly.h, 2^n from the exponent bits.
  // Plain float and integer arithmetic, so the loop vectorizes without libm.
  static F exp2(const F &a) {
    F r;
    for (int i = 0; i < W; ++i) {
      float x = a.v[i] > -126.0f ? a.v[i] : -126.0f;  // NaN also becomes -126
      const float n = (x - 12582912.0f) + 12582912.0f;  // round to nearest, |x| < 2^22
      const float f = x - n;
      float p = kExp2Poly[0];
      for (int c = 1; c < 6; ++c) p = p * f + kExp2Poly[c];
      const int32_t e = static_cast<int32_t>(n) + 127;
      r.v[i] = p * __builtin_bit_cast(float, static_cast<uint32_t>(e) << 23);
    }
    return r;
  }
};

}  // namespace
}  // namespace cpu
}  // namespace flash_attn
