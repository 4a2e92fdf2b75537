// AVX-512 row kernels for silu_and_mul.
//
// Only this file is compiled with the AVX-512 flags (see build.toml). It
// includes nothing but <immintrin.h> and <cstdint>: including torch or
// standard-library headers here would let the compiler emit AVX-512 copies of
// shared inline functions, and the linker may then pick those copies for the
// whole library, which would crash on CPUs without AVX-512.
//
// The functions here are reached only through the run-time check in
// swiglu_cpu/silu_and_mul.cpp; threading is done by the caller.

#include "swiglu_cpu_avx512/silu_and_mul_avx512.h"

#if defined(__x86_64__) || defined(_M_X64)

#include <immintrin.h>

namespace {

#define SWIGLU_INLINE inline __attribute__((always_inline))

// exp(x) for 16 floats with x <= 0: x = n*ln2 + r with |r| <= ln2/2, exp(r)
// by a degree-7 polynomial, 2^n applied with vscalefps, which produces the
// subnormal results exactly and underflows to 0 by itself. Clamping below
// keeps -inf (and NaN, since vmaxps returns its second operand for a NaN
// first one) out of the range reduction, where it would make inf - inf.
SWIGLU_INLINE __m512 exp_nonpositive_ps(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-104.0f);  // exp(-104) < 2^-149: rounds to 0
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  // ln2 split into a part with few mantissa bits (exact n*ln2_hi) and the rest.
  const __m512 ln2_hi = _mm512_set1_ps(0.693359375f);
  const __m512 ln2_lo = _mm512_set1_ps(-2.12194440054690583e-4f);

  x = _mm512_max_ps(x, lo);
  const __m512 n = _mm512_roundscale_ps(
      _mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
  r = _mm512_fnmadd_ps(n, ln2_lo, r);

  // Taylor coefficients 1/k!, Horner form.
  __m512 p = _mm512_set1_ps(1.98412698412698413e-4f);                  // 1/5040
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.38888888888888889e-3f));  // 1/720
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.33333333333333333e-3f));  // 1/120
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.16666666666666667e-2f));  // 1/24
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.66666666666666667e-1f));  // 1/6
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// silu(g) * u = g * sigmoid(g) * u, with e = exp(-|g|) in (0, 1]:
//   sigmoid(g) = 1 / (1 + e)  for g >= 0,   e / (1 + e)  for g < 0.
// The denominator stays in [1, 2], so nothing overflows, and 1 / (1 + e) can
// use vrcp14ps plus one Newton step (relative error ~2^-28) instead of the
// much slower vdivps. silu is formed before the product with u so that a large
// |g * u| cannot overflow where the true result is finite.
SWIGLU_INLINE __m512 silu_mul_ps(__m512 g, __m512 u) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 two = _mm512_set1_ps(2.0f);
  const __m512 neg_abs_g = _mm512_castsi512_ps(_mm512_or_si512(
      _mm512_castps_si512(g), _mm512_set1_epi32(static_cast<int>(0x80000000u))));
  const __m512 e = exp_nonpositive_ps(neg_abs_g);
  const __m512 den = _mm512_add_ps(one, e);
  __m512 inv = _mm512_rcp14_ps(den);
  inv = _mm512_mul_ps(inv, _mm512_fnmadd_ps(den, inv, two));
  const __mmask16 negative = _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_LT_OQ);
  const __m512 sigmoid = _mm512_mask_mul_ps(inv, negative, inv, e);
  return _mm512_mul_ps(_mm512_mul_ps(g, sigmoid), u);
}

SWIGLU_INLINE __mmask16 tail_mask(int64_t n) {
  return static_cast<__mmask16>((1u << static_cast<unsigned>(n)) - 1u);
}

// ---- element types: load 16 values as fp32 / store 16 fp32 values --------

struct F32 {
  using T = float;
  static SWIGLU_INLINE __m512 load(const T* p) { return _mm512_loadu_ps(p); }
  static SWIGLU_INLINE __m512 load(const T* p, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, p);
  }
  static SWIGLU_INLINE void store(T* p, __m512 v) { _mm512_storeu_ps(p, v); }
  static SWIGLU_INLINE void store(T* p, __m512 v, __mmask16 m) {
    _mm512_mask_storeu_ps(p, m, v);
  }
};

struct BF16 {
  using T = uint16_t;
  static SWIGLU_INLINE __m512 widen(__m256i raw) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
  }
  // fp32 -> bf16 with round-to-nearest-even; NaN becomes the quiet NaN 0x7fc0
  // (the same bit pattern c10::BFloat16 produces).
  static SWIGLU_INLINE __m512i narrow(__m512 v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i lsb =
        _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i bias = _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fc0));
  }
  static SWIGLU_INLINE __m512 load(const T* p) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static SWIGLU_INLINE __m512 load(const T* p, __mmask16 m) {
    return widen(_mm256_maskz_loadu_epi16(m, p));  // AVX512BW + VL
  }
  static SWIGLU_INLINE void store(T* p, __m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtepi32_epi16(narrow(v)));
  }
  static SWIGLU_INLINE void store(T* p, __m512 v, __mmask16 m) {
    _mm512_mask_cvtepi32_storeu_epi16(p, m, narrow(v));
  }
};

struct F16 {
  using T = uint16_t;
  static constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  static SWIGLU_INLINE __m512 load(const T* p) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static SWIGLU_INLINE __m512 load(const T* p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));  // AVX512BW + VL
  }
  static SWIGLU_INLINE void store(T* p, __m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(v, kRound));
  }
  static SWIGLU_INLINE void store(T* p, __m512 v, __mmask16 m) {
    _mm256_mask_storeu_epi16(p, m, _mm512_cvtps_ph(v, kRound));  // BW + VL
  }
};

template <typename E>
SWIGLU_INLINE void run_rows(typename E::T* out, const typename E::T* in,
                            int64_t rows, int64_t d, int64_t out_row_stride,
                            int64_t in_row_stride) {
  constexpr int64_t W = 16;
  for (int64_t r = 0; r < rows; ++r) {
    const typename E::T* gate = in + r * in_row_stride;
    const typename E::T* up = gate + d;
    typename E::T* o = out + r * out_row_stride;
    int64_t j = 0;
    // Two vectors per iteration so that two exp chains are in flight.
    for (; j + 2 * W <= d; j += 2 * W) {
      const __m512 g0 = E::load(gate + j);
      const __m512 g1 = E::load(gate + j + W);
      const __m512 u0 = E::load(up + j);
      const __m512 u1 = E::load(up + j + W);
      E::store(o + j, silu_mul_ps(g0, u0));
      E::store(o + j + W, silu_mul_ps(g1, u1));
    }
    for (; j + W <= d; j += W) {
      E::store(o + j, silu_mul_ps(E::load(gate + j), E::load(up + j)));
    }
    if (j < d) {
      const __mmask16 m = tail_mask(d - j);
      E::store(o + j, silu_mul_ps(E::load(gate + j, m), E::load(up + j, m)),
               m);
    }
  }
}

#undef SWIGLU_INLINE

}  // namespace

namespace swiglu {
namespace avx512 {

void silu_and_mul_f32(float* out, const float* in, int64_t rows, int64_t d,
                      int64_t out_row_stride, int64_t in_row_stride) {
  run_rows<F32>(out, in, rows, d, out_row_stride, in_row_stride);
}

void silu_and_mul_bf16(uint16_t* out, const uint16_t* in, int64_t rows,
                       int64_t d, int64_t out_row_stride,
                       int64_t in_row_stride) {
  run_rows<BF16>(out, in, rows, d, out_row_stride, in_row_stride);
}

void silu_and_mul_f16(uint16_t* out, const uint16_t* in, int64_t rows,
                      int64_t d, int64_t out_row_stride,
                      int64_t in_row_stride) {
  run_rows<F16>(out, in, rows, d, out_row_stride, in_row_stride);
}

}  // namespace avx512
}  // namespace swiglu

#endif  // x86-64
