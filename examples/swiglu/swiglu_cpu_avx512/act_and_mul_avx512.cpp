// AVX-512 row kernels for the act_and_mul ops, forward and backward.
//
// Only this file is compiled with the AVX-512 flags (see build.toml). It
// includes nothing but <immintrin.h>, <cstdint> and the include-free
// swiglu_common/activations.h: including torch or standard-library headers
// here would let the compiler emit AVX-512 copies of shared inline functions,
// and the linker may then pick those copies for the whole library, which
// would crash on CPUs without AVX-512. (activations.h's templates are only
// instantiated with this file's anonymous-namespace types, so their copies
// have internal linkage.)
//
// The functions here are reached only through the run-time check in
// swiglu_cpu/act_and_mul.cpp; threading is done by the caller.

#include "swiglu_cpu_avx512/act_and_mul_avx512.h"

#if defined(__x86_64__) || defined(_M_X64)

#include <immintrin.h>

namespace {

#define SWIGLU_INLINE inline __attribute__((always_inline))

using swiglu::Activation;

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

// 16 floats with the arithmetic that activations.h writes the math in.
struct V16 {
  __m512 v;
  V16() = default;
  SWIGLU_INLINE V16(__m512 x) : v(x) {}
  SWIGLU_INLINE explicit V16(float c) : v(_mm512_set1_ps(c)) {}
};
SWIGLU_INLINE V16 operator+(V16 a, V16 b) { return _mm512_add_ps(a.v, b.v); }
SWIGLU_INLINE V16 operator-(V16 a, V16 b) { return _mm512_sub_ps(a.v, b.v); }
SWIGLU_INLINE V16 operator*(V16 a, V16 b) { return _mm512_mul_ps(a.v, b.v); }

// The math policy of activations.h for AVX-512.
struct Avx512Math {
  using V = V16;
  static SWIGLU_INLINE V exp_neg(V x) { return exp_nonpositive_ps(x.v); }
  // vrcp14ps plus one Newton step (relative error ~2^-28) instead of the
  // much slower vdivps. The argument is capped at 2^100 first: rcp14(inf) = 0
  // would make the Newton step inf * 0 = NaN, and 2^-100 is as good as 0
  // wherever a reciprocal is taken (activations.h: arguments >= 1).
  static SWIGLU_INLINE V recip(V x) {
    const __m512 d = _mm512_min_ps(x.v, _mm512_set1_ps(0x1p100f));
    const __m512 r = _mm512_rcp14_ps(d);
    return _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
  }
  static SWIGLU_INLINE V neg_abs(V x) {
    return _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_castps_si512(x.v), _mm512_set1_epi32(static_cast<int>(0x80000000u))));
  }
  static SWIGLU_INLINE V select_neg(V z, V a, V b) {
    const __mmask16 negative = _mm512_cmp_ps_mask(z.v, _mm512_setzero_ps(), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(negative, b.v, a.v);
  }
  static SWIGLU_INLINE V fma(V a, V b, V c) { return _mm512_fmadd_ps(a.v, b.v, c.v); }
};

// ---- element types: load 16 values as fp32 / store 16 fp32 values --------

constexpr int64_t W = 16;

// A whole vector, or the first n lanes of one (the row tail).
struct Full {};
struct Tail {
  __mmask16 m;
};
SWIGLU_INLINE Tail tail(int64_t n) {
  return {static_cast<__mmask16>((1u << static_cast<unsigned>(n)) - 1u)};
}

struct F32 {
  using T = float;
  static SWIGLU_INLINE V16 load(const T* p, Full) { return _mm512_loadu_ps(p); }
  static SWIGLU_INLINE V16 load(const T* p, Tail t) { return _mm512_maskz_loadu_ps(t.m, p); }
  static SWIGLU_INLINE void store(T* p, V16 v, Full) { _mm512_storeu_ps(p, v.v); }
  static SWIGLU_INLINE void store(T* p, V16 v, Tail t) { _mm512_mask_storeu_ps(p, t.m, v.v); }
};

struct BF16 {
  using T = uint16_t;
  static SWIGLU_INLINE V16 widen(__m256i raw) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
  }
  // fp32 -> bf16 with round-to-nearest-even; NaN becomes the quiet NaN 0x7fc0
  // (the same bit pattern c10::BFloat16 produces).
  static SWIGLU_INLINE __m512i narrow(V16 f) {
    const __m512i bits = _mm512_castps_si512(f.v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i bias = _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff));
    const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(f.v, f.v, _CMP_UNORD_Q);
    return _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fc0));
  }
  static SWIGLU_INLINE V16 load(const T* p, Full) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static SWIGLU_INLINE V16 load(const T* p, Tail t) {
    return widen(_mm256_maskz_loadu_epi16(t.m, p));  // AVX512BW + VL
  }
  static SWIGLU_INLINE void store(T* p, V16 v, Full) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(narrow(v)));
  }
  static SWIGLU_INLINE void store(T* p, V16 v, Tail t) {
    _mm512_mask_cvtepi32_storeu_epi16(p, t.m, narrow(v));
  }
};

// The same conversions, rounding with AVX512_BF16's vcvtneps2bf16 (one
// instruction for the seven of BF16::narrow; the same results, NaN included).
// Inline assembly, so that no function here needs -mavx512bf16: only
// with_dtype picks this type, and only on CPUs that have the instruction.
struct BF16Native : BF16 {
  static SWIGLU_INLINE __m256i narrow(V16 f) {
    __m256i r;
    __asm__("vcvtneps2bf16 %1, %0" : "=v"(r) : "v"(f.v));
    return r;
  }
  static SWIGLU_INLINE void store(T* p, V16 v, Full) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow(v));
  }
  static SWIGLU_INLINE void store(T* p, V16 v, Tail t) {
    _mm256_mask_storeu_epi16(p, t.m, narrow(v));  // BW + VL
  }
};

struct F16 {
  using T = uint16_t;
  static constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  static SWIGLU_INLINE V16 load(const T* p, Full) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static SWIGLU_INLINE V16 load(const T* p, Tail t) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(t.m, p));  // AVX512BW + VL
  }
  static SWIGLU_INLINE void store(T* p, V16 v, Full) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v.v, kRound));
  }
  static SWIGLU_INLINE void store(T* p, V16 v, Tail t) {
    _mm256_mask_storeu_epi16(p, t.m, _mm512_cvtps_ph(v.v, kRound));  // BW + VL
  }
};

// ---- row loops -------------------------------------------------------------

// step(j, mask) for every vector of a row of `cols` elements: two vectors
// per iteration so that two independent exp chains are in flight, then the
// rest, then a masked tail.
template <class Step>
SWIGLU_INLINE void for_each_vector(int64_t cols, Step&& step) {
  int64_t j = 0;
  for (; j + 2 * W <= cols; j += 2 * W) {
    step(j, Full{});
    step(j + W, Full{});
  }
  for (; j + W <= cols; j += W) {
    step(j, Full{});
  }
  if (j < cols) {
    step(j, tail(cols - j));
  }
}

template <class E, class A>
void forward_rows(int64_t rows, int64_t cols, typename E::T* out, int64_t out_stride,
                  const typename E::T* gate, const typename E::T* up, int64_t in_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    const typename E::T* g = gate + r * in_stride;
    const typename E::T* u = up + r * in_stride;
    typename E::T* o = out + r * out_stride;
    for_each_vector(cols, [&](int64_t j, auto mask) {
      E::store(o + j,
               swiglu::act_and_mul<Avx512Math, A>(E::load(g + j, mask), E::load(u + j, mask)),
               mask);
    });
  }
}

template <class E, class A>
void backward_rows(int64_t rows, int64_t cols, typename E::T* d_gate, typename E::T* d_up,
                   int64_t grad_in_stride, const typename E::T* grad_out,
                   int64_t grad_out_stride, const typename E::T* gate,
                   const typename E::T* up, int64_t in_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    const typename E::T* g = gate + r * in_stride;
    const typename E::T* u = up + r * in_stride;
    const typename E::T* go = grad_out + r * grad_out_stride;
    typename E::T* dg = d_gate + r * grad_in_stride;
    typename E::T* du = d_up + r * grad_in_stride;
    for_each_vector(cols, [&](int64_t j, auto mask) {
      const swiglu::GradPair<V16> grad = swiglu::act_and_mul_grad<Avx512Math, A>(
          E::load(g + j, mask), E::load(u + j, mask), E::load(go + j, mask));
      E::store(dg + j, grad.gate, mask);
      E::store(du + j, grad.up, mask);
    });
  }
}

// Calls f(E{}) with the element type of dtype.
template <class F>
SWIGLU_INLINE void with_dtype(swiglu::avx512::DType dtype, F&& f) {
  switch (dtype) {
    case swiglu::avx512::DType::kFloat32:
      f(F32{});
      break;
    case swiglu::avx512::DType::kBFloat16: {
      static const bool native = (__builtin_cpu_init(), __builtin_cpu_supports("avx512bf16"));
      if (native) {
        f(BF16Native{});
      } else {
        f(BF16{});
      }
      break;
    }
    case swiglu::avx512::DType::kFloat16:
      f(F16{});
      break;
  }
}

#undef SWIGLU_INLINE

}  // namespace

namespace swiglu {
namespace avx512 {

void forward(Activation act, DType dtype, int64_t rows, int64_t cols, void* out,
             int64_t out_stride, const void* gate, const void* up, int64_t in_stride) {
  with_dtype(dtype, [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    with_activation<Avx512Math>(act, [&](auto a) {
      forward_rows<E, decltype(a)>(rows, cols, static_cast<T*>(out), out_stride,
                                   static_cast<const T*>(gate), static_cast<const T*>(up),
                                   in_stride);
    });
  });
}

void backward(Activation act, DType dtype, int64_t rows, int64_t cols, void* d_gate,
              void* d_up, int64_t grad_in_stride, const void* grad_out,
              int64_t grad_out_stride, const void* gate, const void* up, int64_t in_stride) {
  with_dtype(dtype, [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    with_activation<Avx512Math>(act, [&](auto a) {
      backward_rows<E, decltype(a)>(rows, cols, static_cast<T*>(d_gate), static_cast<T*>(d_up),
                                    grad_in_stride, static_cast<const T*>(grad_out),
                                    grad_out_stride, static_cast<const T*>(gate),
                                    static_cast<const T*>(up), in_stride);
    });
  });
}

}  // namespace avx512
}  // namespace swiglu

#endif  // x86-64
