// Portable CPU implementation of silu_and_mul, plus the run-time switch to the
// AVX-512 unit (swiglu_cpu_avx512/).
//
// This file is compiled with the baseline flags only, so at::vec::Vectorized
// here is the portable (array-based) implementation; the arithmetic below is
// written so that the compiler vectorizes it for the baseline ISA. Rows are
// split across threads with at::parallel_for, which is OpenMP-backed in the
// standard torch builds and respects torch.set_num_threads().

#include "swiglu_cpu/silu_and_mul.h"

#include <ATen/Dispatch.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <c10/util/bit_cast.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#define SWIGLU_HAVE_AVX512_UNIT 1
#include "swiglu_cpu_avx512/silu_and_mul_avx512.h"
#endif

namespace swiglu {
namespace cpu {
namespace {

// ---- path selection ------------------------------------------------------

bool env_disables_avx512() {
  const char* value = std::getenv("SWIGLU_DISABLE_AVX512");
  if (value == nullptr) {
    return false;
  }
  std::string v(value);
  std::transform(v.begin(), v.end(), v.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return !(v.empty() || v == "0" || v == "false" || v == "off" || v == "no");
}

bool cpu_supports_avx512_unit() {
#if defined(SWIGLU_HAVE_AVX512_UNIT) && (defined(__GNUC__) || defined(__clang__))
  // libgcc's checks include the OS (XCR0) support for the ZMM/opmask state.
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

// ---- portable row kernel -------------------------------------------------

using fVec = at::vec::Vectorized<float>;

// Same value as ATen's at::internal::GRAIN_SIZE.
constexpr int64_t kGrainElements = 32768;

// exp(x) for x <= 0, in plain float arithmetic without libm calls, so that
// the fixed-length lane loop in silu_mul below auto-vectorizes for the
// baseline ISA (the portable Vectorized<float>::exp() is a scalar std::exp
// per lane). Same scheme as the AVX-512 unit: x = n*ln2 + r, |r| <= ln2/2,
// degree-7 polynomial for exp(r), then 2^n.
//
// Selections are done on integers or between constants, and every floating
// point operation is unconditional: under the default -ftrapping-math GCC
// does not if-convert a conditional floating point operation, and the loop
// would stay scalar.
inline float exp_nonpositive(float x) {
  // Clamp to [-104, 0] (exp(-104) rounds to 0). For floats with the sign bit
  // set, a larger magnitude is a larger bit pattern; NaN (sign bit set here)
  // is above all of them and becomes -104 as well.
  const uint32_t bits = c10::bit_cast<uint32_t>(x);
  const uint32_t lo = c10::bit_cast<uint32_t>(-104.0f);
  x = c10::bit_cast<float>(bits < lo ? bits : lo);
  const float t = x * 1.44269504088896341f;
  const float n = (t - 12582912.0f) + 12582912.0f;  // round to nearest, |t| < 2^22
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440054690583e-4f;
  float p = 1.98412698412698413e-4f;
  p = p * r + 1.38888888888888889e-3f;
  p = p * r + 8.33333333333333333e-3f;
  p = p * r + 4.16666666666666667e-2f;
  p = p * r + 1.66666666666666667e-1f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n with n in [-150, 0] as 2^(n - n/2) * 2^(n/2): both factors are
  // normal floats, and only the last product can round (into a subnormal).
  const int32_t k = static_cast<int32_t>(n);
  const int32_t k1 = k >> 1;
  const int32_t k2 = k - k1;
  const float s1 = c10::bit_cast<float>(static_cast<uint32_t>(k1 + 127) << 23);
  const float s2 = c10::bit_cast<float>(static_cast<uint32_t>(k2 + 127) << 23);
  return p * s1 * s2;
}

// silu(g) * u with sigmoid from e = exp(-|g|), as in the AVX-512 unit: the
// denominator 1 + e stays in [1, 2], so nothing overflows for large |g|.
//   sigmoid(g) = 1 / (1 + e) for g >= 0,  e / (1 + e) for g < 0.
inline float silu_mul_scalar(float g, float u) {
  const uint32_t g_bits = c10::bit_cast<uint32_t>(g);
  const float e = exp_nonpositive(c10::bit_cast<float>(g_bits | 0x80000000u));
  const float inv = 1.0f / (1.0f + e);
  // factor = g < 0 ? e : 1, as a bit mask select (see exp_nonpositive).
  const uint32_t negative = static_cast<uint32_t>(static_cast<int32_t>(g_bits) >> 31);
  const float factor = c10::bit_cast<float>(
      (negative & c10::bit_cast<uint32_t>(e)) |
      (~negative & c10::bit_cast<uint32_t>(1.0f)));
  return g * (inv * factor) * u;
}

inline fVec silu_mul(const fVec& g, const fVec& u) {
  constexpr int W = fVec::size();
  alignas(64) float gs[W];
  alignas(64) float us[W];
  alignas(64) float os[W];
  g.store(gs);
  u.store(us);
  for (int k = 0; k < W; ++k) {
    os[k] = silu_mul_scalar(gs[k], us[k]);
  }
  return fVec::loadu(os);
}

template <typename scalar_t>
void generic_rows(scalar_t* out, const scalar_t* in, int64_t rows, int64_t d,
                  int64_t out_row_stride, int64_t in_row_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    const scalar_t* gate = in + r * in_row_stride;
    const scalar_t* up = gate + d;
    scalar_t* o = out + r * out_row_stride;
    int64_t j = 0;
    if constexpr (std::is_same_v<scalar_t, float>) {
      constexpr int64_t W = fVec::size();
      for (; j + W <= d; j += W) {
        silu_mul(fVec::loadu(gate + j), fVec::loadu(up + j)).store(o + j);
      }
      if (j < d) {
        const int n = static_cast<int>(d - j);
        silu_mul(fVec::loadu(gate + j, n), fVec::loadu(up + j, n))
            .store(o + j, n);
      }
    } else {
      using bVec = at::vec::Vectorized<scalar_t>;
      constexpr int64_t W = bVec::size();
      auto step = [](const bVec& g, const bVec& u) {
        auto [g0, g1] = at::vec::convert_to_float<scalar_t>(g);
        auto [u0, u1] = at::vec::convert_to_float<scalar_t>(u);
        return at::vec::convert_from_float<scalar_t>(silu_mul(g0, u0),
                                                     silu_mul(g1, u1));
      };
      for (; j + W <= d; j += W) {
        step(bVec::loadu(gate + j), bVec::loadu(up + j)).store(o + j);
      }
      if (j < d) {
        const int n = static_cast<int>(d - j);
        step(bVec::loadu(gate + j, n), bVec::loadu(up + j, n)).store(o + j, n);
      }
    }
  }
}

// ---- AVX-512 row kernel (only called when avx512_enabled()) ---------------

template <typename scalar_t>
void avx512_rows(scalar_t* out, const scalar_t* in, int64_t rows, int64_t d,
                 int64_t out_row_stride, int64_t in_row_stride) {
#if defined(SWIGLU_HAVE_AVX512_UNIT)
  if constexpr (std::is_same_v<scalar_t, float>) {
    avx512::silu_and_mul_f32(out, in, rows, d, out_row_stride, in_row_stride);
  } else {
    static_assert(sizeof(scalar_t) == sizeof(uint16_t),
                  "16-bit floating point type expected");
    auto* o = reinterpret_cast<uint16_t*>(out);
    const auto* i = reinterpret_cast<const uint16_t*>(in);
    if constexpr (std::is_same_v<scalar_t, c10::BFloat16>) {
      avx512::silu_and_mul_bf16(o, i, rows, d, out_row_stride, in_row_stride);
    } else {
      static_assert(std::is_same_v<scalar_t, c10::Half>);
      avx512::silu_and_mul_f16(o, i, rows, d, out_row_stride, in_row_stride);
    }
  }
#else
  generic_rows(out, in, rows, d, out_row_stride, in_row_stride);
#endif
}

template <typename scalar_t>
void run(scalar_t* out, const scalar_t* in, int64_t rows, int64_t d,
         int64_t out_row_stride, int64_t in_row_stride) {
  const bool use_avx512 = avx512_enabled();
  // Aim for at least kGrainElements elements touched (3 * d per row) per task.
  const int64_t grain =
      std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, 3 * d));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    scalar_t* o = out + begin * out_row_stride;
    const scalar_t* i = in + begin * in_row_stride;
    if (use_avx512) {
      avx512_rows(o, i, end - begin, d, out_row_stride, in_row_stride);
    } else {
      generic_rows(o, i, end - begin, d, out_row_stride, in_row_stride);
    }
  });
}

// ---- layout helpers --------------------------------------------------------

// If the leading dimensions of t (all but the last) collapse into one row
// dimension, returns the element stride between consecutive rows; otherwise
// returns -1. Size-1 dimensions are ignored.
int64_t collapsed_row_stride(const at::Tensor& t) {
  int64_t row_stride = -1;
  int64_t expected = -1;
  for (int64_t i = t.dim() - 2; i >= 0; --i) {
    if (t.size(i) == 1) {
      continue;
    }
    if (row_stride < 0) {
      row_stride = t.stride(i);
    } else if (t.stride(i) != expected) {
      return -1;
    }
    expected = t.stride(i) * t.size(i);
  }
  // A single row: any stride works.
  return row_stride < 0 ? t.size(-1) : row_stride;
}

}  // namespace

bool avx512_enabled() {
  static const bool enabled = cpu_supports_avx512_unit() && !env_disables_avx512();
  return enabled;
}

void silu_and_mul(at::Tensor& out, const at::Tensor& input) {
  TORCH_CHECK(input.dim() >= 1,
              "silu_and_mul: input must have at least one dimension, got a "
              "0-dim tensor");
  const int64_t width = input.size(-1);
  TORCH_CHECK(width % 2 == 0,
              "silu_and_mul: the last dimension of input must be even "
              "(gate and up halves of size d each), got input of shape ",
              input.sizes());
  const int64_t d = width / 2;

  TORCH_CHECK(out.device() == input.device(),
              "silu_and_mul: out and input must be on the same device, got out "
              "on ", out.device(), " and input on ", input.device());
  TORCH_CHECK(input.device().is_cpu(),
              "silu_and_mul: this is the CPU implementation, got input on ",
              input.device());
  const at::ScalarType dtype = input.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf,
              "silu_and_mul: unsupported dtype ", dtype,
              " (expected float32, bfloat16 or float16)");
  TORCH_CHECK(out.scalar_type() == dtype,
              "silu_and_mul: out and input must have the same dtype, got out ",
              out.scalar_type(), " and input ", dtype);

  std::vector<int64_t> expected_shape(input.sizes().begin(), input.sizes().end());
  expected_shape.back() = d;
  TORCH_CHECK(out.sizes() == at::IntArrayRef(expected_shape),
              "silu_and_mul: out must have shape ", at::IntArrayRef(expected_shape),
              " for input of shape ", input.sizes(), ", got ", out.sizes());

  if (out.numel() == 0) {
    return;
  }

  TORCH_CHECK(input.stride(-1) == 1,
              "silu_and_mul: the last dimension of input must be contiguous "
              "(stride 1), got strides ", input.strides());
  TORCH_CHECK(out.stride(-1) == 1 || d == 1,
              "silu_and_mul: the last dimension of out must be contiguous "
              "(stride 1), got strides ", out.strides());
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, input);

  // Rows may be strided (e.g. a slice of a wider buffer); only a layout whose
  // leading dimensions do not collapse into one row stride needs a copy.
  at::Tensor in = input;
  int64_t in_row_stride = collapsed_row_stride(in);
  if (in_row_stride < 0) {
    in = input.contiguous();
    in_row_stride = width;
  }
  at::Tensor dst = out;
  int64_t out_row_stride = collapsed_row_stride(dst);
  if (out_row_stride < 0) {
    dst = at::empty(out.sizes(), out.options());
    out_row_stride = d;
  }
  const int64_t rows = out.numel() / d;

  AT_DISPATCH_SWITCH(
      dtype, "silu_and_mul_cpu",
      AT_DISPATCH_CASE(at::ScalarType::Float,
                       [&] {
                         run<scalar_t>(dst.data_ptr<scalar_t>(),
                                       in.const_data_ptr<scalar_t>(), rows, d,
                                       out_row_stride, in_row_stride);
                       })
      AT_DISPATCH_CASE(at::ScalarType::BFloat16,
                       [&] {
                         run<scalar_t>(dst.data_ptr<scalar_t>(),
                                       in.const_data_ptr<scalar_t>(), rows, d,
                                       out_row_stride, in_row_stride);
                       })
      AT_DISPATCH_CASE(at::ScalarType::Half, [&] {
        run<scalar_t>(dst.data_ptr<scalar_t>(), in.const_data_ptr<scalar_t>(),
                      rows, d, out_row_stride, in_row_stride);
      }));

  if (!dst.is_same(out)) {
    out.copy_(dst);
  }
}

}  // namespace cpu
}  // namespace swiglu
