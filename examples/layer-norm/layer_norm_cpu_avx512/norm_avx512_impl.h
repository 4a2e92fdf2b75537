// The AVX-512 row kernels (norms forward and backward, silu_and_mul),
// included by the two
// AVX-512 translation units: norm_avx512.cpp (AVX512F/BW/VL + FMA) and
// norm_avx512_bf16.cpp (the same plus AVX512_BF16, whose vcvtneps2bf16
// replaces the eight-instruction software fp32 -> bf16 rounding; the bf16
// ops are compute-bound without it). Each includer defines
// LAYER_NORM_AVX512_NS, the namespace of its entry points.
//
// Those units are the only ones compiled with AVX-512 flags (see build.toml),
// and with -ffp-contract=off: FMAs are explicit, so every instantiation rounds
// alike (e.g. with and without a fused residual).
// They include nothing but this file, <immintrin.h> and <cstdint>: including
// torch or standard-library headers there would let the compiler emit AVX-512
// copies of shared inline functions, and the linker may then pick those copies
// for the whole library, which would crash on CPUs without AVX-512.
// Everything but the entry points has internal linkage for the same reason.
//
// The functions are reached only through the run-time CPU checks in
// layer_norm_cpu/layer_norm_cpu.cpp; threading is done by the caller.
#pragma once

#ifndef LAYER_NORM_AVX512_NS
#error "define LAYER_NORM_AVX512_NS before including norm_avx512_impl.h"
#endif

#include "layer_norm_cpu_avx512/norm_avx512.h"

#if defined(__x86_64__) || defined(_M_X64)

#include <immintrin.h>

namespace {

#define LN_INLINE inline __attribute__((always_inline))
#define LN_INLINE_LAMBDA __attribute__((always_inline))

using layer_norm_avx512::DType;
using layer_norm_avx512::NormBwdParams;
using layer_norm_avx512::NormFwdParams;

constexpr int64_t W = 16;  // fp32 lanes per __m512

LN_INLINE __mmask16 first_lanes(int64_t k) {
  return static_cast<__mmask16>((1u << static_cast<unsigned>(k)) - 1u);
}

LN_INLINE float sqrt_scalar(float v) {
  return _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(v)));
}

// ---- element types: 16 values <-> 16 fp32 lanes ---------------------------

struct F32 {
  using T = float;
  static constexpr bool kExact = true;  // storing fp32 loses nothing
  static constexpr int64_t kStreamAlign = 64;  // bytes of one streamed vector
  static LN_INLINE __m512 load(const T* p) { return _mm512_loadu_ps(p); }
  static LN_INLINE __m512 load(const T* p, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, p);
  }
  static LN_INLINE void store(T* p, __m512 v) { _mm512_storeu_ps(p, v); }
  static LN_INLINE void store(T* p, __m512 v, __mmask16 m) {
    _mm512_mask_storeu_ps(p, m, v);
  }
  // Non-temporal store: p must be kStreamAlign-aligned.
  static LN_INLINE void stream(T* p, __m512 v) { _mm512_stream_ps(p, v); }
  static LN_INLINE __m512 round(__m512 v) { return v; }
  static LN_INLINE __m512 store_rounded(T* p, __m512 v) {
    store(p, v);
    return v;
  }
  static LN_INLINE __m512 store_rounded(T* p, __m512 v, __mmask16 m) {
    store(p, v, m);
    return v;
  }
  static LN_INLINE __m512 stream_rounded(T* p, __m512 v) {
    stream(p, v);
    return v;
  }
};

// 16-bit types. Derived provides narrow (16 fp32 lanes -> 16 values in a
// __m256i, round to nearest even) and widen (the exact inverse direction).
template <class Derived>
struct Bits16 {
  using T = uint16_t;
  static constexpr bool kExact = false;
  static constexpr int64_t kStreamAlign = 32;
  static LN_INLINE __m512 load(const T* p) {
    return Derived::widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static LN_INLINE __m512 load(const T* p, __mmask16 m) {
    return Derived::widen(_mm256_maskz_loadu_epi16(m, p));  // AVX512BW + VL
  }
  static LN_INLINE void store(T* p, __m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), Derived::narrow(v));
  }
  static LN_INLINE void store(T* p, __m512 v, __mmask16 m) {
    _mm256_mask_storeu_epi16(p, m, Derived::narrow(v));  // AVX512BW + VL
  }
  static LN_INLINE void stream(T* p, __m512 v) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), Derived::narrow(v));
  }
  // What storing v and loading it back gives.
  static LN_INLINE __m512 round(__m512 v) {
    return Derived::widen(Derived::narrow(v));
  }
  static LN_INLINE __m512 store_rounded(T* p, __m512 v) {
    const __m256i h = Derived::narrow(v);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
    return Derived::widen(h);
  }
  static LN_INLINE __m512 store_rounded(T* p, __m512 v, __mmask16 m) {
    const __m256i h = Derived::narrow(v);
    _mm256_mask_storeu_epi16(p, m, h);
    return Derived::widen(h);
  }
  static LN_INLINE __m512 stream_rounded(T* p, __m512 v) {
    const __m256i h = Derived::narrow(v);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), h);
    return Derived::widen(h);
  }
};

struct BF16 : Bits16<BF16> {
  static LN_INLINE __m512 widen(__m256i raw) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
  }
#if defined(__AVX512BF16__)
  // Round to nearest even in one instruction. Unlike c10's conversion it
  // flushes results below the smallest normal bf16 (|v| < 2^-126) to zero and
  // keeps a NaN's sign and payload (quieted).
  static LN_INLINE __m256i narrow(__m512 v) {
    return (__m256i)_mm512_cvtneps_pbh(v);
  }
#else
  // Round to nearest even; NaN becomes the quiet NaN 0x7fc0 (the bit pattern
  // c10::BFloat16 produces).
  static LN_INLINE __m256i narrow(__m512 v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i bias = _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fc0));
    return _mm512_cvtepi32_epi16(r);
  }
#endif
};

struct F16 : Bits16<F16> {
  static LN_INLINE __m512 widen(__m256i raw) { return _mm512_cvtph_ps(raw); }
  static LN_INLINE __m256i narrow(__m512 v) {
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
};

// Full or masked (tail) access, chosen at compile time.
template <bool kMasked>
LN_INLINE __m512 load_f32(const float* p, __mmask16 m) {
  if constexpr (kMasked) {
    return _mm512_maskz_loadu_ps(m, p);
  } else {
    return _mm512_loadu_ps(p);
  }
}
template <bool kMasked>
LN_INLINE void store_f32(float* p, __m512 v, __mmask16 m) {
  if constexpr (kMasked) {
    _mm512_mask_storeu_ps(p, m, v);
  } else {
    _mm512_storeu_ps(p, v);
  }
}
template <class E, bool kMasked>
LN_INLINE __m512 load_e(const typename E::T* p, __mmask16 m) {
  if constexpr (kMasked) {
    return E::load(p, m);
  } else {
    return E::load(p);
  }
}
template <class E, bool kMasked>
LN_INLINE __m512 store_rounded_e(typename E::T* p, __m512 v, __mmask16 m) {
  if constexpr (kMasked) {
    return E::store_rounded(p, v, m);
  } else {
    return E::store_rounded(p, v);
  }
}

// ---- forward norms ---------------------------------------------------------
//
// Per row: sweep 1 is the only one that reads the row from memory. It forms
// s = x (+ residual, rounded to the element type and written to residual_out),
// keeps s in fp32 in `buf` (unless the row is fp32 without residual: then the
// input row itself stays in the cache) and accumulates sum(s) (LayerNorm) or
// sum(s^2) (RMSNorm). LayerNorm's mean and variance are then corrected with
// sums of s - mean over the cached row (the corrected two-pass algorithm: no
// cancellation for rows with a large mean), and the last sweep writes the
// output. Masked tails: masked-off lanes load as 0.

struct Row {
  int64_t n;
  const float* weight;  // fp32, or nullptr
  const float* bias;
};

// Sweep 1 for one vector at j. kStream: full vectors of residual_out are
// written with non-temporal stores (the row is aligned for them).
template <class E, bool kResidual, bool kRms, bool kKeep, bool kStream, bool kMasked>
LN_INLINE void sweep1_step(const typename E::T* x, const typename E::T* res,
                           typename E::T* res_out, float* buf, int64_t j,
                           __mmask16 m, __m512& acc) {
  __m512 v = load_e<E, kMasked>(x + j, m);
  if constexpr (kResidual) {
    const __m512 sum = _mm512_add_ps(v, load_e<E, kMasked>(res + j, m));
    if constexpr (kStream && !kMasked) {
      v = E::stream_rounded(res_out + j, sum);
    } else {
      v = store_rounded_e<E, kMasked>(res_out + j, sum, m);
    }
  }
  if constexpr (kKeep) {
    store_f32<kMasked>(buf + j, v, m);
  }
  acc = kRms ? _mm512_fmadd_ps(v, v, acc) : _mm512_add_ps(acc, v);
}

template <class E, bool kResidual, bool kRms, bool kKeep, bool kStream>
LN_INLINE float sweep1(const typename E::T* x, const typename E::T* res,
                       typename E::T* res_out, float* buf, int64_t n) {
  // Two accumulators: two independent add chains in flight.
  __m512 a0 = _mm512_setzero_ps();
  __m512 a1 = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 2 * W <= n; j += 2 * W) {
    sweep1_step<E, kResidual, kRms, kKeep, kStream, false>(x, res, res_out, buf, j, 0, a0);
    sweep1_step<E, kResidual, kRms, kKeep, kStream, false>(x, res, res_out, buf, j + W, 0, a1);
  }
  if (j + W <= n) {
    sweep1_step<E, kResidual, kRms, kKeep, kStream, false>(x, res, res_out, buf, j, 0, a0);
    j += W;
  }
  if (j < n) {
    sweep1_step<E, kResidual, kRms, kKeep, kStream, true>(x, res, res_out, buf, j,
                                                          first_lanes(n - j), a1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

// Sums of d = s - mean and of d^2 over the fp32 row. With them the mean is
// corrected (mean + sum(d) / n) and the variance is sum(d^2) / n - (sum(d) /
// n)^2: the corrected two-pass algorithm, accurate even when the first mean
// is off by fp32 rounding (rows with a large mean).
struct Centered {
  float sum_d;
  float sum_d2;
};

LN_INLINE Centered centered_sums(const float* row, int64_t n, float mean) {
  const __m512 mu = _mm512_set1_ps(mean);
  __m512 d0 = _mm512_setzero_ps();
  __m512 d1 = _mm512_setzero_ps();
  __m512 q0 = _mm512_setzero_ps();
  __m512 q1 = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 2 * W <= n; j += 2 * W) {
    const __m512 a = _mm512_sub_ps(_mm512_loadu_ps(row + j), mu);
    const __m512 b = _mm512_sub_ps(_mm512_loadu_ps(row + j + W), mu);
    d0 = _mm512_add_ps(d0, a);
    d1 = _mm512_add_ps(d1, b);
    q0 = _mm512_fmadd_ps(a, a, q0);
    q1 = _mm512_fmadd_ps(b, b, q1);
  }
  for (; j < n; j += W) {
    const __mmask16 m = n - j >= W ? static_cast<__mmask16>(0xffff) : first_lanes(n - j);
    const __m512 a = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, row + j), mu);
    d0 = _mm512_add_ps(d0, a);
    q0 = _mm512_fmadd_ps(a, a, q0);
  }
  return {_mm512_reduce_add_ps(_mm512_add_ps(d0, d1)),
          _mm512_reduce_add_ps(_mm512_add_ps(q0, q1))};
}

// The output for one vector of the fp32 row at j.
template <class E, bool kRms, bool kMasked>
LN_INLINE __m512 output_value(const float* row, const Row& p, int64_t j,
                              __mmask16 m, __m512 mean, __m512 rstd) {
  const __m512 v = load_f32<kMasked>(row + j, m);
  if constexpr (kRms) {
    // LlamaRMSNorm: weight * (s * rstd).to(input_dtype).
    __m512 o = E::round(_mm512_mul_ps(v, rstd));
    if (p.weight != nullptr) {
      o = _mm512_mul_ps(o, load_f32<kMasked>(p.weight + j, m));
    }
    return o;
  } else {
    __m512 o = _mm512_mul_ps(_mm512_sub_ps(v, mean), rstd);
    if (p.weight != nullptr && p.bias != nullptr) {
      return _mm512_fmadd_ps(o, load_f32<kMasked>(p.weight + j, m),
                             load_f32<kMasked>(p.bias + j, m));
    }
    if (p.weight != nullptr) {
      o = _mm512_mul_ps(o, load_f32<kMasked>(p.weight + j, m));
    }
    if (p.bias != nullptr) {
      o = _mm512_add_ps(o, load_f32<kMasked>(p.bias + j, m));
    }
    return o;
  }
}

// Prefetches the line holding p[j] (a row the next sweep 1 will read).
template <class T>
LN_INLINE void prefetch(const T* p, int64_t j) {
  if (p != nullptr) {
    _mm_prefetch(reinterpret_cast<const char*>(p + j), _MM_HINT_T0);
  }
}

// Writes the output row (kStream: full vectors with non-temporal stores, the
// row being aligned for them). Meanwhile it prefetches the next row's input
// (and residual): the hardware prefetcher alone leaves sweep 1 waiting on
// memory, since it does not run ahead while this sweep computes.
template <class E, bool kRms, bool kStream>
LN_INLINE void write_row(const float* row, typename E::T* y, const Row& p,
                         float mean_s, float rstd_s, const typename E::T* next_x,
                         const typename E::T* next_res) {
  const int64_t n = p.n;
  const __m512 mean = _mm512_set1_ps(mean_s);
  const __m512 rstd = _mm512_set1_ps(rstd_s);
  const auto put = [&](int64_t j, __m512 v) LN_INLINE_LAMBDA {
    if constexpr (kStream) {
      E::stream(y + j, v);
    } else {
      E::store(y + j, v);
    }
  };
  int64_t j = 0;
  for (; j + 2 * W <= n; j += 2 * W) {
    prefetch(next_x, j);
    prefetch(next_x, j + W);
    prefetch(next_res, j);
    prefetch(next_res, j + W);
    const __m512 o0 = output_value<E, kRms, false>(row, p, j, 0, mean, rstd);
    const __m512 o1 = output_value<E, kRms, false>(row, p, j + W, 0, mean, rstd);
    put(j, o0);
    put(j + W, o1);
  }
  for (; j + W <= n; j += W) {
    prefetch(next_x, j);
    prefetch(next_res, j);
    put(j, output_value<E, kRms, false>(row, p, j, 0, mean, rstd));
  }
  if (j < n) {
    const __mmask16 m = first_lanes(n - j);
    E::store(y + j, output_value<E, kRms, true>(row, p, j, m, mean, rstd), m);
  }
}

template <class T, int64_t kAlign>
LN_INLINE bool aligned_to(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % kAlign == 0;
}

template <class E, bool kResidual, bool kRms>
void norm_rows(const NormFwdParams& p, int64_t begin, int64_t end, float* scratch) {
  using T = typename E::T;
  // An fp32 row without residual is read again from the cache; otherwise
  // the fp32 values of s are kept in scratch.
  constexpr bool kKeep = kResidual || !E::kExact;
  const int64_t n = p.n;
  const float inv_n = 1.0f / static_cast<float>(n);
  const Row row_params{n, p.weight, p.bias};
  for (int64_t r = begin; r < end; ++r) {
    const T* x = static_cast<const T*>(p.input) + r * p.input_stride;
    const T* res = kResidual ? static_cast<const T*>(p.residual) + r * p.residual_stride : nullptr;
    T* res_out = kResidual ? static_cast<T*>(p.residual_out) + r * p.residual_out_stride : nullptr;
    T* y = static_cast<T*>(p.out) + r * p.out_stride;

    // Non-temporal stores need aligned vectors: rows that start aligned (all
    // rows of a contiguous tensor with n a multiple of 16) use them, others
    // take plain stores. Either way the arithmetic is the same.
    const bool stream_res = kResidual && p.stream_out && aligned_to<T, E::kStreamAlign>(res_out);
    const float acc = stream_res
        ? sweep1<E, kResidual, kRms, kKeep, true>(x, res, res_out, scratch, n)
        : sweep1<E, kResidual, kRms, kKeep, false>(x, res, res_out, scratch, n);
    const float* row = kKeep ? scratch : reinterpret_cast<const float*>(x);
    float mean = 0.0f;
    float var;
    if constexpr (kRms) {
      var = acc * inv_n;
    } else {
      mean = acc * inv_n;
      const Centered c = centered_sums(row, n, mean);
      const float shift = c.sum_d * inv_n;
      mean += shift;
      var = c.sum_d2 * inv_n - shift * shift;
      var = var > 0.0f ? var : 0.0f;
      p.mean[r] = mean;
    }
    const float rstd = 1.0f / sqrt_scalar(var + p.eps);
    p.rstd[r] = rstd;
    const bool more = r + 1 < end;
    const T* next_x = more ? x + p.input_stride : nullptr;
    const T* next_res = more && kResidual ? res + p.residual_stride : nullptr;
    if (p.stream_out && aligned_to<T, E::kStreamAlign>(y)) {
      write_row<E, kRms, true>(row, y, row_params, mean, rstd, next_x, next_res);
    } else {
      write_row<E, kRms, false>(row, y, row_params, mean, rstd, next_x, next_res);
    }
  }
  if (p.stream_out) {
    // Non-temporal stores are weakly ordered: make them visible before the
    // caller (and other threads) read the output.
    _mm_sfence();
  }
}

template <class E>
void norm_rows_dispatch(const NormFwdParams& p, int64_t begin, int64_t end, float* scratch) {
  const bool residual = p.residual != nullptr;
  if (p.rms) {
    residual ? norm_rows<E, true, true>(p, begin, end, scratch)
             : norm_rows<E, false, true>(p, begin, end, scratch);
  } else {
    residual ? norm_rows<E, true, false>(p, begin, end, scratch)
             : norm_rows<E, false, false>(p, begin, end, scratch);
  }
}

// ---- backward ----------------------------------------------------------------
//
// Per row, xhat = (s - mean) * rstd (LayerNorm) or s * rstd (RMSNorm) and
// g = grad_out * weight; sweep A (reads s and grad_out from memory) keeps xhat
// and g in scratch, sums g and g * xhat, and adds grad_out * xhat and
// grad_out to this chunk's grad_weight / grad_bias partial sums (RMSNorm: the
// xhat rounded to the dtype, which is what the weight multiplied); sweep B
// writes grad_s = rstd * (g - mean(g) - xhat * mean(g * xhat)) (RMSNorm
// without the mean(g) term) plus grad_residual_out.

template <class E, bool kRms, bool kMasked>
LN_INLINE void bwd_sweep_a_step(const typename E::T* x, const typename E::T* dy,
                                const float* w, float* dw, float* db, float* xh_buf,
                                float* g_buf, int64_t j, __mmask16 m, __m512 mean,
                                __m512 rstd, __m512& sum_g, __m512& sum_gx) {
  const __m512 xv = load_e<E, kMasked>(x + j, m);
  const __m512 d = load_e<E, kMasked>(dy + j, m);
  const __m512 xhat = kRms ? _mm512_mul_ps(xv, rstd) : _mm512_mul_ps(_mm512_sub_ps(xv, mean), rstd);
  const __m512 g = w != nullptr ? _mm512_mul_ps(d, load_f32<kMasked>(w + j, m)) : d;
  store_f32<kMasked>(xh_buf + j, xhat, m);
  store_f32<kMasked>(g_buf + j, g, m);
  sum_g = _mm512_add_ps(sum_g, g);
  sum_gx = _mm512_fmadd_ps(g, xhat, sum_gx);
  if (dw != nullptr) {
    const __m512 used = kRms ? E::round(xhat) : xhat;
    store_f32<kMasked>(dw + j, _mm512_fmadd_ps(d, used, load_f32<kMasked>(dw + j, m)), m);
  }
  if (db != nullptr) {
    store_f32<kMasked>(db + j, _mm512_add_ps(load_f32<kMasked>(db + j, m), d), m);
  }
}

template <class E, bool kRms, bool kMasked>
LN_INLINE void bwd_sweep_b_step(const typename E::T* dres, typename E::T* dx,
                                const float* xh_buf, const float* g_buf, int64_t j,
                                __mmask16 m, __m512 rstd, __m512 c1, __m512 c2) {
  // rstd * (g - c2 - xhat * c1)
  __m512 v = _mm512_fnmadd_ps(load_f32<kMasked>(xh_buf + j, m), c1,
                              _mm512_sub_ps(load_f32<kMasked>(g_buf + j, m), c2));
  v = _mm512_mul_ps(v, rstd);
  if (dres != nullptr) {
    v = _mm512_add_ps(v, load_e<E, kMasked>(dres + j, m));
  }
  if constexpr (kMasked) {
    E::store(dx + j, v, m);
  } else {
    E::store(dx + j, v);
  }
}

template <class E, bool kRms>
void bwd_rows(const NormBwdParams& p, int64_t begin, int64_t end, float* scratch,
              float* dw, float* db) {
  using T = typename E::T;
  const int64_t n = p.n;
  const float inv_n = 1.0f / static_cast<float>(n);
  float* xh_buf = scratch;
  float* g_buf = scratch + n;
  for (int64_t r = begin; r < end; ++r) {
    const T* x = static_cast<const T*>(p.input) + r * p.input_stride;
    const T* dy = static_cast<const T*>(p.grad_out) + r * p.grad_out_stride;
    const T* dres = p.grad_residual_out != nullptr
        ? static_cast<const T*>(p.grad_residual_out) + r * p.grad_residual_out_stride
        : nullptr;
    T* dx = static_cast<T*>(p.grad_input) + r * p.grad_input_stride;
    const __m512 mean = _mm512_set1_ps(kRms ? 0.0f : p.mean[r]);
    const __m512 rstd = _mm512_set1_ps(p.rstd[r]);
    __m512 sum_g = _mm512_setzero_ps();
    __m512 sum_gx = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + W <= n; j += W) {
      bwd_sweep_a_step<E, kRms, false>(x, dy, p.weight, dw, db, xh_buf, g_buf, j, 0, mean,
                                       rstd, sum_g, sum_gx);
    }
    if (j < n) {
      bwd_sweep_a_step<E, kRms, true>(x, dy, p.weight, dw, db, xh_buf, g_buf, j,
                                      first_lanes(n - j), mean, rstd, sum_g, sum_gx);
    }
    const __m512 c1 = _mm512_set1_ps(_mm512_reduce_add_ps(sum_gx) * inv_n);
    const __m512 c2 = _mm512_set1_ps(kRms ? 0.0f : _mm512_reduce_add_ps(sum_g) * inv_n);
    j = 0;
    for (; j + W <= n; j += W) {
      bwd_sweep_b_step<E, kRms, false>(dres, dx, xh_buf, g_buf, j, 0, rstd, c1, c2);
    }
    if (j < n) {
      bwd_sweep_b_step<E, kRms, true>(dres, dx, xh_buf, g_buf, j, first_lanes(n - j), rstd,
                                      c1, c2);
    }
  }
}

template <class E>
void bwd_rows_dispatch(const NormBwdParams& p, int64_t begin, int64_t end, float* scratch,
                       float* dw, float* db) {
  p.rms ? bwd_rows<E, true>(p, begin, end, scratch, dw, db)
        : bwd_rows<E, false>(p, begin, end, scratch, dw, db);
}

// ---- silu_and_mul ----------------------------------------------------------
// (The same numerics as examples/swiglu's AVX-512 unit.)

// exp(x) for x <= 0: x = n*ln2 + r with |r| <= ln2/2, exp(r) by a degree-7
// polynomial, 2^n applied with vscalefps (exact subnormal results, underflow
// to 0). The clamp keeps -inf and NaN out of the range reduction.
LN_INLINE __m512 exp_nonpositive_ps(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-104.0f);  // exp(-104) < 2^-149: rounds to 0
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  const __m512 ln2_hi = _mm512_set1_ps(0.693359375f);
  const __m512 ln2_lo = _mm512_set1_ps(-2.12194440054690583e-4f);
  x = _mm512_max_ps(x, lo);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
  r = _mm512_fnmadd_ps(n, ln2_lo, r);
  __m512 q = _mm512_set1_ps(1.98412698412698413e-4f);                  // 1/5040
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.38888888888888889e-3f));  // 1/720
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(8.33333333333333333e-3f));  // 1/120
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(4.16666666666666667e-2f));  // 1/24
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.66666666666666667e-1f));  // 1/6
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0.5f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(q, n);
}

// silu(g) * u with e = exp(-|g|): sigmoid(g) = 1/(1+e) for g >= 0, e/(1+e)
// for g < 0, so the denominator stays in [1, 2] and nothing overflows;
// 1/(1+e) by vrcp14ps and one Newton step.
LN_INLINE __m512 silu_mul_ps(__m512 g, __m512 u) {
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

template <class E, bool kStream>
LN_INLINE void silu_row(typename E::T* o, const typename E::T* gate, int64_t d) {
  const typename E::T* up = gate + d;
  const auto put = [&](int64_t j, __m512 v) LN_INLINE_LAMBDA {
    if constexpr (kStream) {
      E::stream(o + j, v);
    } else {
      E::store(o + j, v);
    }
  };
  int64_t j = 0;
  // Two vectors per iteration: two exp chains in flight.
  for (; j + 2 * W <= d; j += 2 * W) {
    const __m512 g0 = E::load(gate + j);
    const __m512 g1 = E::load(gate + j + W);
    const __m512 u0 = E::load(up + j);
    const __m512 u1 = E::load(up + j + W);
    put(j, silu_mul_ps(g0, u0));
    put(j + W, silu_mul_ps(g1, u1));
  }
  for (; j + W <= d; j += W) {
    put(j, silu_mul_ps(E::load(gate + j), E::load(up + j)));
  }
  if (j < d) {
    const __mmask16 m = first_lanes(d - j);
    E::store(o + j, silu_mul_ps(E::load(gate + j, m), E::load(up + j, m)), m);
  }
}

template <class E>
void silu_rows(typename E::T* out, const typename E::T* in, int64_t rows, int64_t d,
               int64_t out_stride, int64_t in_stride, bool stream) {
  for (int64_t r = 0; r < rows; ++r) {
    typename E::T* o = out + r * out_stride;
    if (stream && aligned_to<typename E::T, E::kStreamAlign>(o)) {
      silu_row<E, true>(o, in + r * in_stride, d);
    } else {
      silu_row<E, false>(o, in + r * in_stride, d);
    }
  }
  if (stream) {
    _mm_sfence();
  }
}

#undef LN_INLINE
#undef LN_INLINE_LAMBDA

}  // namespace

namespace LAYER_NORM_AVX512_NS {

void norm_fwd_rows(const NormFwdParams& p, int64_t row_begin, int64_t row_end,
                   float* scratch) {
  switch (p.dtype) {
    case DType::kF32:
      norm_rows_dispatch<F32>(p, row_begin, row_end, scratch);
      break;
    case DType::kBF16:
      norm_rows_dispatch<BF16>(p, row_begin, row_end, scratch);
      break;
    case DType::kF16:
      norm_rows_dispatch<F16>(p, row_begin, row_end, scratch);
      break;
  }
}

void norm_bwd_rows(const NormBwdParams& p, int64_t row_begin, int64_t row_end,
                   float* scratch, float* grad_weight_part, float* grad_bias_part) {
  switch (p.dtype) {
    case DType::kF32:
      bwd_rows_dispatch<F32>(p, row_begin, row_end, scratch, grad_weight_part, grad_bias_part);
      break;
    case DType::kBF16:
      bwd_rows_dispatch<BF16>(p, row_begin, row_end, scratch, grad_weight_part, grad_bias_part);
      break;
    case DType::kF16:
      bwd_rows_dispatch<F16>(p, row_begin, row_end, scratch, grad_weight_part, grad_bias_part);
      break;
  }
}

void silu_and_mul_rows(DType dtype, void* out, const void* in, int64_t rows,
                       int64_t d, int64_t out_stride, int64_t in_stride,
                       bool stream_out) {
  switch (dtype) {
    case DType::kF32:
      silu_rows<F32>(static_cast<float*>(out), static_cast<const float*>(in),
                     rows, d, out_stride, in_stride, stream_out);
      break;
    case DType::kBF16:
      silu_rows<BF16>(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(in),
                      rows, d, out_stride, in_stride, stream_out);
      break;
    case DType::kF16:
      silu_rows<F16>(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(in),
                     rows, d, out_stride, in_stride, stream_out);
      break;
  }
}

}  // namespace LAYER_NORM_AVX512_NS

#endif  // x86-64
