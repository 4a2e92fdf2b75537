// CPU backend: the torch glue, the portable row kernels, and the run-time
// switch to the AVX-512 unit (swiglu_cpu_avx512/).
//
// This file is compiled with the baseline flags only, so at::vec::Vectorized
// here is the portable (array-based) implementation; the arithmetic below is
// written so that the compiler vectorizes it for the baseline ISA. Work is
// split across threads with at::parallel_for, which is OpenMP-backed in the
// standard torch builds and respects torch.set_num_threads().

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <c10/util/bit_cast.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "swiglu_common/activations.h"
#include "swiglu_common/torch_args.h"
#include "torch-ext/torch_binding.h"

#if defined(__x86_64__) || defined(_M_X64)
#define SWIGLU_HAVE_AVX512_UNIT 1
#include "swiglu_cpu_avx512/act_and_mul_avx512.h"
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

// ---- the portable math policy (activations.h) ------------------------------

// exp(x) for x <= 0, in plain float arithmetic without libm calls, so that
// the fixed-length lane loops below auto-vectorize for the baseline ISA (the
// portable Vectorized<float>::exp() is a scalar std::exp per lane). Same
// scheme as the AVX-512 unit: x = n*ln2 + r, |r| <= ln2/2, degree-7
// polynomial for exp(r), then 2^n.
//
// Selections are done on integers or between constants, and every floating
// point operation is unconditional: under the default -ftrapping-math GCC
// does not if-convert a conditional floating point operation, and the loop
// would stay scalar.
inline float exp_nonpositive(float x) {
  // Clamp to [-104, 0] (exp(-104) rounds to 0). For floats with the sign bit
  // set, a larger magnitude is a larger bit pattern; -inf and NaNs with the
  // sign bit set are above all of them and become -104 as well.
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

struct ScalarMath {
  using V = float;
  static float exp_neg(float x) { return exp_nonpositive(x); }
  static float recip(float x) { return 1.0f / x; }
  static float neg_abs(float x) {
    return c10::bit_cast<float>(c10::bit_cast<uint32_t>(x) | 0x80000000u);
  }
  // By the sign bit, as a mask (see exp_nonpositive): -0.0 counts as
  // negative, which gives the same results, since every use selects between
  // two values that agree at 0.
  static float select_neg(float z, float a, float b) {
    const uint32_t negative =
        static_cast<uint32_t>(static_cast<int32_t>(c10::bit_cast<uint32_t>(z)) >> 31);
    return c10::bit_cast<float>((negative & c10::bit_cast<uint32_t>(a)) |
                                (~negative & c10::bit_cast<uint32_t>(b)));
  }
  static float fma(float a, float b, float c) { return a * b + c; }
};

// ---- portable row kernels --------------------------------------------------

using fVec = at::vec::Vectorized<float>;
constexpr int64_t kW = fVec::size();
// One block: two float vectors, i.e. one Vectorized<BFloat16/Half>.
constexpr int64_t kBlock = 2 * kW;

// n <= kBlock elements of T at p, as floats in f[0, kBlock).
template <typename T>
inline void load_block(const T* p, int64_t n, float* f) {
  if constexpr (std::is_same_v<T, float>) {
    fVec::loadu(p, static_cast<int>(std::min(n, kW))).store(f);
    if (n > kW) {
      fVec::loadu(p + kW, static_cast<int>(n - kW)).store(f + kW);
    } else {
      fVec(0.0f).store(f + kW);
    }
  } else {
    static_assert(at::vec::Vectorized<T>::size() == kBlock);
    auto [lo, hi] = at::vec::convert_to_float<T>(
        at::vec::Vectorized<T>::loadu(p, static_cast<int>(n)));
    lo.store(f);
    hi.store(f + kW);
  }
}

// The first n of f[0, kBlock) to p, rounded to T.
template <typename T>
inline void store_block(T* p, int64_t n, const float* f) {
  if constexpr (std::is_same_v<T, float>) {
    fVec::loadu(f).store(p, static_cast<int>(std::min(n, kW)));
    if (n > kW) {
      fVec::loadu(f + kW).store(p + kW, static_cast<int>(n - kW));
    }
  } else {
    at::vec::convert_from_float<T>(fVec::loadu(f), fVec::loadu(f + kW))
        .store(p, static_cast<int>(n));
  }
}

// The lane loops have a fixed trip count over float arrays and inline every
// call, so GCC vectorizes them for the baseline ISA.
template <typename T, class A>
void forward_rows(int64_t rows, int64_t cols, T* out, int64_t out_stride,
                  const T* gate, const T* up, int64_t in_stride) {
  alignas(64) float g[kBlock];
  alignas(64) float u[kBlock];
  alignas(64) float o[kBlock];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; j += kBlock) {
      const int64_t n = std::min(kBlock, cols - j);
      load_block(gate + r * in_stride + j, n, g);
      load_block(up + r * in_stride + j, n, u);
      for (int64_t k = 0; k < kBlock; ++k) {
        o[k] = act_and_mul<ScalarMath, A>(g[k], u[k]);
      }
      store_block(out + r * out_stride + j, n, o);
    }
  }
}

template <typename T, class A>
void backward_rows(int64_t rows, int64_t cols, T* d_gate, T* d_up,
                   int64_t grad_in_stride, const T* grad_out,
                   int64_t grad_out_stride, const T* gate, const T* up,
                   int64_t in_stride) {
  alignas(64) float g[kBlock];
  alignas(64) float u[kBlock];
  alignas(64) float go[kBlock];
  alignas(64) float dg[kBlock];
  alignas(64) float du[kBlock];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; j += kBlock) {
      const int64_t n = std::min(kBlock, cols - j);
      load_block(gate + r * in_stride + j, n, g);
      load_block(up + r * in_stride + j, n, u);
      load_block(grad_out + r * grad_out_stride + j, n, go);
      for (int64_t k = 0; k < kBlock; ++k) {
        const GradPair<float> grad = act_and_mul_grad<ScalarMath, A>(g[k], u[k], go[k]);
        dg[k] = grad.gate;
        du[k] = grad.up;
      }
      store_block(d_gate + r * grad_in_stride + j, n, dg);
      store_block(d_up + r * grad_in_stride + j, n, du);
    }
  }
}

#if defined(SWIGLU_HAVE_AVX512_UNIT)
template <typename T>
constexpr avx512::DType avx512_dtype() {
  if constexpr (std::is_same_v<T, float>) {
    return avx512::DType::kFloat32;
  } else if constexpr (std::is_same_v<T, c10::BFloat16>) {
    return avx512::DType::kBFloat16;
  } else {
    static_assert(std::is_same_v<T, c10::Half>);
    return avx512::DType::kFloat16;
  }
}
#endif

// ---- threading -------------------------------------------------------------

// Same value as ATen's at::internal::GRAIN_SIZE: elements touched per task.
constexpr int64_t kGrainElements = 32768;
// The narrowest column block a row is split into.
constexpr int64_t kMinBlockCols = 4096;

// f(row_begin, row_end, col_begin, col_end) over the rows x cols grid, on
// torch's intra-op threads: whole rows when there are enough of them, else
// column blocks of the rows too, so that a few long rows (an MLP at decode
// time: one row of 11008) still use every thread. `touched` is the number of
// elements read and written per output element (3 forward, 5 backward).
template <class F>
void parallel_spans(int64_t rows, int64_t cols, int64_t touched, const F& f) {
  const int64_t threads = at::get_num_threads();
  int64_t blocks = 1;
  if (rows < threads) {
    blocks = std::min((threads + rows - 1) / rows, cols / kMinBlockCols);
  }
  if (blocks <= 1) {
    const int64_t grain =
        std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, touched * cols));
    at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
      f(begin, end, int64_t{0}, cols);
    });
    return;
  }
  // Blocks of a multiple of 64 columns, so that only the last one has a tail.
  const int64_t width = ((cols + blocks - 1) / blocks + 63) / 64 * 64;
  blocks = (cols + width - 1) / width;
  at::parallel_for(0, rows * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t row = t / blocks;
      const int64_t col = (t % blocks) * width;
      f(row, row + 1, col, std::min(cols, col + width));
    }
  });
}

}  // namespace

bool avx512_enabled() {
  static const bool enabled = cpu_supports_avx512_unit() && !env_disables_avx512();
  return enabled;
}

}  // namespace cpu

void act_and_mul(Activation act, at::Tensor& out, const at::Tensor& input) {
  run_forward(act, c10::DeviceType::CPU, out, input, [&](const ForwardRows& r) {
    with_scalar_type(input.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      T* o = r.out.tensor.data_ptr<T>();
      const T* in = r.input.tensor.const_data_ptr<T>();
      const int64_t os = r.out.stride;
      const int64_t is = r.input.stride;
      [[maybe_unused]] const bool fast = cpu::avx512_enabled();
      cpu::parallel_spans(r.rows, r.d, 3, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
        T* out_ = o + r0 * os + c0;
        const T* gate = in + r0 * is + c0;
        const T* up = gate + r.d;
#if defined(SWIGLU_HAVE_AVX512_UNIT)
        if (fast) {
          avx512::forward(act, cpu::avx512_dtype<T>(), r1 - r0, c1 - c0, out_, os, gate, up, is);
          return;
        }
#endif
        with_activation<cpu::ScalarMath>(act, [&](auto a) {
          cpu::forward_rows<T, decltype(a)>(r1 - r0, c1 - c0, out_, os, gate, up, is);
        });
      });
    });
  });
}

void act_and_mul_backward(Activation act, at::Tensor& grad_input,
                          const at::Tensor& grad_out, const at::Tensor& input) {
  run_backward(act, c10::DeviceType::CPU, grad_input, grad_out, input, [&](const BackwardRows& r) {
    with_scalar_type(input.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      T* gi = r.grad_input.tensor.data_ptr<T>();
      const T* go = r.grad_out.tensor.const_data_ptr<T>();
      const T* in = r.input.tensor.const_data_ptr<T>();
      const int64_t gis = r.grad_input.stride;
      const int64_t gos = r.grad_out.stride;
      const int64_t is = r.input.stride;
      [[maybe_unused]] const bool fast = cpu::avx512_enabled();
      cpu::parallel_spans(r.rows, r.d, 5, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
        T* d_gate = gi + r0 * gis + c0;
        T* d_up = d_gate + r.d;
        const T* dout = go + r0 * gos + c0;
        const T* gate = in + r0 * is + c0;
        const T* up = gate + r.d;
#if defined(SWIGLU_HAVE_AVX512_UNIT)
        if (fast) {
          avx512::backward(act, cpu::avx512_dtype<T>(), r1 - r0, c1 - c0, d_gate, d_up, gis,
                           dout, gos, gate, up, is);
          return;
        }
#endif
        with_activation<cpu::ScalarMath>(act, [&](auto a) {
          cpu::backward_rows<T, decltype(a)>(r1 - r0, c1 - c0, d_gate, d_up, gis, dout, gos,
                                             gate, up, is);
        });
      });
    });
  });
}

}  // namespace swiglu
