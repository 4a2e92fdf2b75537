// CPU backend of the layer-norm kernel: the torch glue, the portable row
// kernels (every op, fp32/bf16/fp16/fp64) and the run-time switch to the
// AVX-512 unit (layer_norm_cpu_avx512/) for the forward ops.
//
// This file is compiled with the baseline flags only, so at::vec::Vectorized
// here is ATen's portable implementation, which GCC vectorizes for the
// baseline ISA. Rows are split across threads with at::parallel_for (OpenMP in
// the standard torch builds; it follows torch.set_num_threads()).
//
// Numerics (both paths): 16-bit values are computed in fp32 (fp64 in fp64),
// the statistics of a row come from the row held in cache (the corrected
// two-pass algorithm: no cancellation for rows with a large mean; the row is
// read from memory once), and every stored value is
// rounded once, except that RMSNorm rounds the normalized value to the input
// dtype before the weight multiply, exactly as LlamaRMSNorm does.

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <c10/util/bit_cast.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "common/norm_checks.h"
#include "torch-ext/torch_binding.h"

#if defined(__x86_64__) || defined(_M_X64)
#define LAYER_NORM_HAVE_AVX512_UNIT 1
#include "layer_norm_cpu_avx512/norm_avx512.h"
#endif

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace layer_norm_ops {
namespace {

// ---- path selection ---------------------------------------------------------

bool env_flag(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) {
    return false;
  }
  std::string v(value);
  std::transform(v.begin(), v.end(), v.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return !(v.empty() || v == "0" || v == "false" || v == "off" || v == "no");
}

bool cpu_supports_avx512_unit() {
#if defined(LAYER_NORM_HAVE_AVX512_UNIT) && (defined(__GNUC__) || defined(__clang__))
  // libgcc's checks include the OS (XCR0) support for the ZMM/opmask state.
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool cpu_supports_avx512_bf16() {
#if defined(LAYER_NORM_HAVE_AVX512_UNIT) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

// ---- first touch of large outputs -----------------------------------------------
//
// A large output that torch has just allocated is fresh, untouched memory:
// writing it faults in one 4 KiB page at a time, which on the machines
// measured here costs several times the write itself (a 32 MiB output: about
// 15 ms of page faults against 3 ms of writing). Advising transparent huge
// pages for its 2 MiB-aligned interior lets the kernel back it with 2 MiB
// pages instead (torch's THP_MEM_ALLOC_ENABLE=1 does this for every
// allocation). The advice only changes how not-yet-touched pages of that range
// are backed: it is a no-op for memory that is already populated, where THP is
// disabled ("never"), and off Linux. LAYER_NORM_DISABLE_THP=1 turns it off.
constexpr uintptr_t kHugePage = uintptr_t{2} << 20;

void advise_huge_pages(const at::Tensor& t, int64_t rows, int64_t row_stride, int64_t n) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  static const bool disabled = env_flag("LAYER_NORM_DISABLE_THP");
  if (disabled || rows == 0) {
    return;
  }
  const uintptr_t begin = reinterpret_cast<uintptr_t>(t.data_ptr());
  const uintptr_t bytes = static_cast<uintptr_t>(((rows - 1) * row_stride + n) * t.element_size());
  if (bytes < 2 * kHugePage) {
    return;
  }
  const uintptr_t first = (begin + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t last = (begin + bytes) & ~(kHugePage - 1);
  if (last > first) {
    // Advisory: a failure (e.g. EINVAL without THP support) changes nothing.
    (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  }
#else
  (void)t, (void)rows, (void)row_stride, (void)n;
#endif
}

// Same value as ATen's at::internal::GRAIN_SIZE: elements touched per task.
constexpr int64_t kGrainElements = 32768;

int64_t row_grain(int64_t n, int64_t tensors) {
  return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, tensors * n));
}

template <typename scalar_t>
using acc_type = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;

// A per-column parameter converted once per call to the accumulation type
// (empty when absent).
template <typename scalar_t>
std::vector<acc_type<scalar_t>> to_acc(const at::Tensor& p) {
  std::vector<acc_type<scalar_t>> out;
  if (p.defined()) {
    const scalar_t* src = p.const_data_ptr<scalar_t>();
    out.resize(p.numel());
    for (int64_t j = 0; j < p.numel(); ++j) {
      out[j] = static_cast<acc_type<scalar_t>>(src[j]);
    }
  }
  return out;
}

// sum(v) or sum(v * v) over a row, two vector accumulators.
template <typename acc_t, bool kSquares>
acc_t row_sum(const acc_t* v, int64_t n) {
  using Vec = at::vec::Vectorized<acc_t>;
  constexpr int64_t V = Vec::size();
  Vec a0(0), a1(0);
  int64_t j = 0;
  for (; j + 2 * V <= n; j += 2 * V) {
    const Vec x0 = Vec::loadu(v + j);
    const Vec x1 = Vec::loadu(v + j + V);
    a0 = kSquares ? at::vec::fmadd(x0, x0, a0) : a0 + x0;
    a1 = kSquares ? at::vec::fmadd(x1, x1, a1) : a1 + x1;
  }
  acc_t total = at::vec::vec_reduce_all<acc_t>([](Vec a, Vec b) { return a + b; }, a0 + a1);
  for (; j < n; ++j) {
    total += kSquares ? v[j] * v[j] : v[j];
  }
  return total;
}

// The corrected two-pass mean and variance of a row held in cache: with
// d = v - mean0 (mean0 the plain mean), mean = mean0 + sum(d) / n and
// var = sum(d^2) / n - (sum(d) / n)^2, accurate for rows with a large mean.
template <typename acc_t>
void mean_var(const acc_t* v, int64_t n, acc_t& mean, acc_t& var) {
  using Vec = at::vec::Vectorized<acc_t>;
  constexpr int64_t V = Vec::size();
  const acc_t inv_n = acc_t(1) / static_cast<acc_t>(n);
  const acc_t mean0 = row_sum<acc_t, false>(v, n) * inv_n;
  const Vec mu(mean0);
  Vec d(0), q(0);
  int64_t j = 0;
  for (; j + V <= n; j += V) {
    const Vec x = Vec::loadu(v + j) - mu;
    d = d + x;
    q = at::vec::fmadd(x, x, q);
  }
  const auto add = [](Vec a, Vec b) { return a + b; };
  acc_t sum_d = at::vec::vec_reduce_all<acc_t>(add, d);
  acc_t sum_d2 = at::vec::vec_reduce_all<acc_t>(add, q);
  for (; j < n; ++j) {
    const acc_t x = v[j] - mean0;
    sum_d += x;
    sum_d2 += x * x;
  }
  const acc_t shift = sum_d * inv_n;
  mean = mean0 + shift;
  var = std::max(acc_t(0), sum_d2 * inv_n - shift * shift);
}

// ---- portable forward --------------------------------------------------------

struct FwdRows {
  const void* input;
  int64_t input_stride;
  const void* residual;
  int64_t residual_stride;
  void* residual_out;
  int64_t residual_out_stride;
  void* out;
  int64_t out_stride;
  void* mean;
  void* rstd;
  int64_t n;
  double eps;
  bool rms;
};

template <typename scalar_t>
void fwd_rows_portable(const FwdRows& p, const acc_type<scalar_t>* w,
                       const acc_type<scalar_t>* b, int64_t begin, int64_t end) {
  using acc_t = acc_type<scalar_t>;
  const int64_t n = p.n;
  std::vector<acc_t> buf(n);
  for (int64_t r = begin; r < end; ++r) {
    const scalar_t* x = static_cast<const scalar_t*>(p.input) + r * p.input_stride;
    scalar_t* y = static_cast<scalar_t*>(p.out) + r * p.out_stride;
    // Sweep 1, the only one that reads memory: s in the accumulation type.
    if (p.residual != nullptr) {
      const scalar_t* res = static_cast<const scalar_t*>(p.residual) + r * p.residual_stride;
      scalar_t* res_out = static_cast<scalar_t*>(p.residual_out) + r * p.residual_out_stride;
      for (int64_t j = 0; j < n; ++j) {
        const scalar_t s = static_cast<scalar_t>(static_cast<acc_t>(x[j]) +
                                                 static_cast<acc_t>(res[j]));
        res_out[j] = s;
        buf[j] = static_cast<acc_t>(s);
      }
    } else {
      for (int64_t j = 0; j < n; ++j) {
        buf[j] = static_cast<acc_t>(x[j]);
      }
    }
    acc_t mean = 0;
    acc_t var;
    if (p.rms) {
      var = row_sum<acc_t, true>(buf.data(), n) / static_cast<acc_t>(n);
    } else {
      mean_var(buf.data(), n, mean, var);
      static_cast<acc_t*>(p.mean)[r] = mean;
    }
    const acc_t rstd = acc_t(1) / std::sqrt(var + static_cast<acc_t>(p.eps));
    static_cast<acc_t*>(p.rstd)[r] = rstd;
    if (p.rms) {
      // LlamaRMSNorm: weight * (s * rstd).to(input_dtype).
      for (int64_t j = 0; j < n; ++j) {
        const acc_t normed = static_cast<acc_t>(static_cast<scalar_t>(buf[j] * rstd));
        y[j] = static_cast<scalar_t>(w != nullptr ? normed * w[j] : normed);
      }
    } else {
      for (int64_t j = 0; j < n; ++j) {
        acc_t o = (buf[j] - mean) * rstd;
        if (w != nullptr) {
          o = o * w[j];
        }
        if (b != nullptr) {
          o = o + b[j];
        }
        y[j] = static_cast<scalar_t>(o);
      }
    }
  }
}

#if defined(LAYER_NORM_HAVE_AVX512_UNIT)
layer_norm_avx512::DType avx512_dtype(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16:
      return layer_norm_avx512::DType::kBF16;
    case at::kHalf:
      return layer_norm_avx512::DType::kF16;
    default:
      return layer_norm_avx512::DType::kF32;
  }
}
#endif

// Outputs this large are written with non-temporal stores by the AVX-512
// path: they do not stay in a core's caches for the next op anyway, and a
// plain store first reads every destination line from memory (measured on a
// Zen 4 core: bf16 LayerNorm of 2048 x 4096 from 3.0 to 2.4 ms). Smaller
// outputs stay in the cache for whatever consumes them next.
constexpr int64_t kStreamBytes = int64_t{4} << 20;

void norm_fwd(const checks::NormFwd& f, bool rms, double eps) {
  if (f.rows == 0) {
    return;
  }
  const at::ScalarType dtype = f.input.scalar_type();
  FwdRows p{};
  p.input = f.input.const_data_ptr();
  p.input_stride = f.input_stride;
  p.residual = f.residual.defined() ? f.residual.const_data_ptr() : nullptr;
  p.residual_stride = f.residual_stride;
  p.residual_out = f.residual_out.defined() ? f.residual_out.data_ptr() : nullptr;
  p.residual_out_stride = f.residual_out_stride;
  p.out = f.out.data_ptr();
  p.out_stride = f.out_stride;
  p.mean = f.mean.defined() ? f.mean.data_ptr() : nullptr;
  p.rstd = f.rstd.data_ptr();
  p.n = f.n;
  p.eps = eps;
  p.rms = rms;
  const int64_t grain = row_grain(f.n, p.residual != nullptr ? 4 : 2);
  advise_huge_pages(f.out, f.rows, f.out_stride, f.n);
  if (f.residual_out.defined()) {
    advise_huge_pages(f.residual_out, f.rows, f.residual_out_stride, f.n);
  }

#if defined(LAYER_NORM_HAVE_AVX512_UNIT)
  if (dtype != at::kDouble && avx512_enabled()) {
    const at::Tensor w = f.weight.defined() ? f.weight.to(at::kFloat) : at::Tensor();
    const at::Tensor b = f.bias.defined() ? f.bias.to(at::kFloat) : at::Tensor();
    layer_norm_avx512::NormFwdParams a{};
    a.dtype = avx512_dtype(dtype);
    a.rms = rms;
    a.n = f.n;
    a.input = p.input;
    a.input_stride = p.input_stride;
    a.residual = p.residual;
    a.residual_stride = p.residual_stride;
    a.residual_out = p.residual_out;
    a.residual_out_stride = p.residual_out_stride;
    a.out = p.out;
    a.out_stride = p.out_stride;
    a.weight = w.defined() ? w.const_data_ptr<float>() : nullptr;
    a.bias = b.defined() ? b.const_data_ptr<float>() : nullptr;
    a.mean = static_cast<float*>(p.mean);
    a.rstd = static_cast<float*>(p.rstd);
    a.eps = static_cast<float>(eps);
    a.stream_out = f.out.numel() * f.out.element_size() >= kStreamBytes;
    const bool native_bf16 = dtype == at::kBFloat16 && avx512_bf16_enabled();
    at::parallel_for(0, f.rows, grain, [&](int64_t begin, int64_t end) {
      std::vector<float> scratch(f.n);
      if (native_bf16) {
        layer_norm_avx512_bf16::norm_fwd_rows(a, begin, end, scratch.data());
      } else {
        layer_norm_avx512::norm_fwd_rows(a, begin, end, scratch.data());
      }
    });
    return;
  }
#endif

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, dtype, "norm_fwd_cpu", [&] {
    const auto w = to_acc<scalar_t>(f.weight);
    const auto b = to_acc<scalar_t>(f.bias);
    at::parallel_for(0, f.rows, grain, [&](int64_t begin, int64_t end) {
      fwd_rows_portable<scalar_t>(p, w.empty() ? nullptr : w.data(),
                                  b.empty() ? nullptr : b.data(), begin, end);
    });
  });
}

// ---- backward -----------------------------------------------------------------
//
// Per row, with xhat = (s - mean) * rstd (LayerNorm) or s * rstd (RMSNorm) and
// g = grad_out * weight:
//   grad_s = rstd * (g - mean(g) - xhat * mean(g * xhat))     (LayerNorm)
//   grad_s = rstd * (g - xhat * mean(g * xhat))               (RMSNorm)
// plus grad_residual_out. grad_weight = sum over rows of grad_out * xhat (for
// RMSNorm the xhat rounded to the dtype, which is what the weight multiplied),
// grad_bias = sum of grad_out. Rows are split into one chunk per thread, each
// with its own partial sums, reduced in chunk order: the result does not
// depend on scheduling. The AVX-512 unit runs the rows where it is enabled
// (not for fp64).

template <typename scalar_t>
void norm_bwd_typed(const checks::NormBwd& b, bool rms) {
  using acc_t = acc_type<scalar_t>;
  const int64_t n = b.n;
  const int64_t rows = b.rows;
  const auto w = to_acc<scalar_t>(b.weight);
  const bool want_dw = b.grad_weight.defined();
  const bool want_db = b.grad_bias.defined();
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(rows, at::get_num_threads()));
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  std::vector<acc_t> dw_part(want_dw ? chunks * n : 0, acc_t(0));
  std::vector<acc_t> db_part(want_db ? chunks * n : 0, acc_t(0));

  const scalar_t* x_base = b.input.const_data_ptr<scalar_t>();
  const scalar_t* dy_base = b.grad_out.const_data_ptr<scalar_t>();
  const scalar_t* dres_base =
      b.grad_residual_out.defined() ? b.grad_residual_out.const_data_ptr<scalar_t>() : nullptr;
  scalar_t* dx_base = b.grad_input.data_ptr<scalar_t>();
  const acc_t* mean = b.mean.defined() ? b.mean.const_data_ptr<acc_t>() : nullptr;
  const acc_t* rstd = b.rstd.const_data_ptr<acc_t>();

#if defined(LAYER_NORM_HAVE_AVX512_UNIT)
  // The AVX-512 row kernels (fp32 accumulation, like this path for 16-bit).
  layer_norm_avx512::NormBwdParams fast{};
  bool use_fast = false;
  bool native_bf16 = false;
  if constexpr (!std::is_same_v<scalar_t, double>) {
    use_fast = avx512_enabled();
    native_bf16 = std::is_same_v<scalar_t, c10::BFloat16> && avx512_bf16_enabled();
    fast.dtype = avx512_dtype(b.input.scalar_type());
    fast.rms = rms;
    fast.n = n;
    fast.grad_out = dy_base;
    fast.grad_out_stride = b.grad_out_stride;
    fast.grad_residual_out = dres_base;
    fast.grad_residual_out_stride = b.grad_residual_out_stride;
    fast.input = x_base;
    fast.input_stride = b.input_stride;
    fast.mean = mean;
    fast.rstd = rstd;
    fast.weight = w.empty() ? nullptr : w.data();
    fast.grad_input = dx_base;
    fast.grad_input_stride = b.grad_input_stride;
  }
#endif

  at::parallel_for(0, chunks, 1, [&](int64_t c_begin, int64_t c_end) {
    // xhat and g of the current row (also the AVX-512 kernel's scratch).
    std::vector<acc_t> buf(2 * n);
    acc_t* xhat = buf.data();
    acc_t* g = buf.data() + n;
    for (int64_t c = c_begin; c < c_end; ++c) {
      acc_t* dw = want_dw ? dw_part.data() + c * n : nullptr;
      acc_t* db = want_db ? db_part.data() + c * n : nullptr;
      const int64_t r_end = std::min(rows, (c + 1) * rows_per_chunk);
#if defined(LAYER_NORM_HAVE_AVX512_UNIT)
      if constexpr (!std::is_same_v<scalar_t, double>) {
        if (use_fast) {
          const int64_t r_begin = c * rows_per_chunk;
          if (native_bf16) {
            layer_norm_avx512_bf16::norm_bwd_rows(fast, r_begin, r_end, buf.data(), dw, db);
          } else {
            layer_norm_avx512::norm_bwd_rows(fast, r_begin, r_end, buf.data(), dw, db);
          }
          continue;
        }
      }
#endif
      for (int64_t r = c * rows_per_chunk; r < r_end; ++r) {
        const scalar_t* x = x_base + r * b.input_stride;
        const scalar_t* dy = dy_base + r * b.grad_out_stride;
        scalar_t* dx = dx_base + r * b.grad_input_stride;
        const acc_t mu = rms ? acc_t(0) : mean[r];
        const acc_t rs = rstd[r];
        acc_t sum_g = 0;
        acc_t sum_gx = 0;
        for (int64_t j = 0; j < n; ++j) {
          const acc_t xh = (static_cast<acc_t>(x[j]) - mu) * rs;
          const acc_t dyj = static_cast<acc_t>(dy[j]);
          const acc_t gj = w.empty() ? dyj : dyj * w[j];
          xhat[j] = xh;
          g[j] = gj;
          sum_g += gj;
          sum_gx += gj * xh;
          if (dw != nullptr) {
            // RMSNorm's weight multiplied the normalized value rounded to the
            // dtype (LlamaRMSNorm); LayerNorm's the exact one.
            const acc_t used = rms ? static_cast<acc_t>(static_cast<scalar_t>(xh)) : xh;
            dw[j] += dyj * used;
          }
          if (db != nullptr) {
            db[j] += dyj;
          }
        }
        const acc_t inv_n = acc_t(1) / static_cast<acc_t>(n);
        const acc_t c1 = sum_gx * inv_n;
        const acc_t c2 = rms ? acc_t(0) : sum_g * inv_n;
        if (dres_base != nullptr) {
          const scalar_t* dres = dres_base + r * b.grad_residual_out_stride;
          for (int64_t j = 0; j < n; ++j) {
            dx[j] = static_cast<scalar_t>(rs * (g[j] - c2 - xhat[j] * c1) +
                                          static_cast<acc_t>(dres[j]));
          }
        } else {
          for (int64_t j = 0; j < n; ++j) {
            dx[j] = static_cast<scalar_t>(rs * (g[j] - c2 - xhat[j] * c1));
          }
        }
      }
    }
  });

  // Column sums of the per-chunk partials, in chunk order.
  const auto reduce = [&](const std::vector<acc_t>& part, const at::Tensor& dst) {
    scalar_t* out = dst.data_ptr<scalar_t>();
    at::parallel_for(0, n, 1024, [&](int64_t j_begin, int64_t j_end) {
      for (int64_t j = j_begin; j < j_end; ++j) {
        acc_t s = 0;
        for (int64_t c = 0; c < chunks; ++c) {
          s += part[c * n + j];
        }
        out[j] = static_cast<scalar_t>(s);
      }
    });
  };
  if (want_dw) {
    reduce(dw_part, b.grad_weight);
  }
  if (want_db) {
    reduce(db_part, b.grad_bias);
  }
}

void norm_bwd(const checks::NormBwd& b, bool rms) {
  if (b.rows == 0) {
    // No rows: the reductions over rows are zero.
    if (b.grad_weight.defined()) {
      b.grad_weight.zero_();
    }
    if (b.grad_bias.defined()) {
      b.grad_bias.zero_();
    }
    return;
  }
  advise_huge_pages(b.grad_input, b.rows, b.grad_input_stride, b.n);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, b.input.scalar_type(),
                                  "norm_bwd_cpu", [&] { norm_bwd_typed<scalar_t>(b, rms); });
}

// ---- silu_and_mul (portable) ------------------------------------------------------
//
// The numerics of examples/swiglu: e = exp(-|g|) by range reduction and a
// degree-7 polynomial in plain float arithmetic (no libm call, so the
// fixed-length lane loop below auto-vectorizes), sigmoid = 1/(1+e) or e/(1+e)
// by the sign of g: no intermediate overflows.

inline float exp_nonpositive(float x) {
  // Clamp to [-104, 0]: for floats with the sign bit set a larger magnitude
  // is a larger bit pattern, and NaN (sign bit set here) is above them all.
  const uint32_t bits = c10::bit_cast<uint32_t>(x);
  const uint32_t lo = c10::bit_cast<uint32_t>(-104.0f);
  x = c10::bit_cast<float>(bits < lo ? bits : lo);
  const float t = x * 1.44269504088896341f;
  const float n = (t - 12582912.0f) + 12582912.0f;  // round to nearest
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
  // 2^n, n in [-150, 0], as two normal factors: only the last product rounds.
  const int32_t k = static_cast<int32_t>(n);
  const int32_t k1 = k >> 1;
  const int32_t k2 = k - k1;
  const float s1 = c10::bit_cast<float>(static_cast<uint32_t>(k1 + 127) << 23);
  const float s2 = c10::bit_cast<float>(static_cast<uint32_t>(k2 + 127) << 23);
  return p * s1 * s2;
}

inline float silu_mul_scalar(float g, float u) {
  const uint32_t g_bits = c10::bit_cast<uint32_t>(g);
  const float e = exp_nonpositive(c10::bit_cast<float>(g_bits | 0x80000000u));
  const float inv = 1.0f / (1.0f + e);
  // factor = g < 0 ? e : 1, as a bit select (keeps the loop branch-free).
  const uint32_t negative = static_cast<uint32_t>(static_cast<int32_t>(g_bits) >> 31);
  const float factor = c10::bit_cast<float>((negative & c10::bit_cast<uint32_t>(e)) |
                                            (~negative & c10::bit_cast<uint32_t>(1.0f)));
  return g * (inv * factor) * u;
}

inline double silu_mul_scalar(double g, double u) {
  const double e = std::exp(-std::abs(g));
  const double inv = 1.0 / (1.0 + e);
  return g * (g < 0 ? e * inv : inv) * u;
}

template <typename scalar_t>
void silu_rows_portable(scalar_t* out, const scalar_t* in, int64_t rows, int64_t d,
                        int64_t out_stride, int64_t in_stride) {
  using acc_t = acc_type<scalar_t>;
  constexpr int64_t L = 16;  // lanes of the fixed-length loop GCC vectorizes
  for (int64_t r = 0; r < rows; ++r) {
    const scalar_t* gate = in + r * in_stride;
    const scalar_t* up = gate + d;
    scalar_t* o = out + r * out_stride;
    int64_t j = 0;
    for (; j + L <= d; j += L) {
      acc_t g[L], u[L], res[L];
      for (int64_t k = 0; k < L; ++k) {
        g[k] = static_cast<acc_t>(gate[j + k]);
        u[k] = static_cast<acc_t>(up[j + k]);
      }
      for (int64_t k = 0; k < L; ++k) {
        res[k] = silu_mul_scalar(g[k], u[k]);
      }
      for (int64_t k = 0; k < L; ++k) {
        o[j + k] = static_cast<scalar_t>(res[k]);
      }
    }
    for (; j < d; ++j) {
      o[j] = static_cast<scalar_t>(
          silu_mul_scalar(static_cast<acc_t>(gate[j]), static_cast<acc_t>(up[j])));
    }
  }
}

}  // namespace

// ---- the ops -----------------------------------------------------------------------

bool avx512_enabled() {
  static const bool enabled =
      cpu_supports_avx512_unit() && !env_flag("LAYER_NORM_DISABLE_AVX512");
  return enabled;
}

bool avx512_bf16_enabled() {
  static const bool enabled = avx512_enabled() && cpu_supports_avx512_bf16() &&
                              !env_flag("LAYER_NORM_DISABLE_AVX512_BF16");
  return enabled;
}

void layer_norm_fwd(at::Tensor& out, const std::optional<at::Tensor>& residual_out,
                    at::Tensor& mean, at::Tensor& rstd, const at::Tensor& input,
                    const std::optional<at::Tensor>& residual,
                    const std::optional<at::Tensor>& weight,
                    const std::optional<at::Tensor>& bias, double eps) {
  TORCH_CHECK(input.device().is_cpu(), "layer_norm_fwd: this is the CPU implementation, got input on ",
              input.device());
  const auto f = checks::prepare_fwd("layer_norm_fwd", out, residual_out, &mean, rstd, input,
                                     residual, weight, bias, /*allow_double=*/true);
  norm_fwd(f, /*rms=*/false, eps);
}

void rms_norm_fwd(at::Tensor& out, const std::optional<at::Tensor>& residual_out,
                  at::Tensor& rstd, const at::Tensor& input,
                  const std::optional<at::Tensor>& residual,
                  const std::optional<at::Tensor>& weight, double eps) {
  TORCH_CHECK(input.device().is_cpu(), "rms_norm_fwd: this is the CPU implementation, got input on ",
              input.device());
  const auto f = checks::prepare_fwd("rms_norm_fwd", out, residual_out, nullptr, rstd, input,
                                     residual, weight, std::nullopt, /*allow_double=*/true);
  norm_fwd(f, /*rms=*/true, eps);
}

void layer_norm_bwd(at::Tensor& grad_input, const std::optional<at::Tensor>& grad_weight,
                    const std::optional<at::Tensor>& grad_bias, const at::Tensor& grad_out,
                    const std::optional<at::Tensor>& grad_residual_out,
                    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& rstd,
                    const std::optional<at::Tensor>& weight) {
  TORCH_CHECK(input.device().is_cpu(), "layer_norm_bwd: this is the CPU implementation, got input on ",
              input.device());
  const auto b = checks::prepare_bwd("layer_norm_bwd", grad_input, grad_weight, &grad_bias,
                                     grad_out, grad_residual_out, input, &mean, rstd, weight,
                                     /*allow_double=*/true);
  norm_bwd(b, /*rms=*/false);
}

void rms_norm_bwd(at::Tensor& grad_input, const std::optional<at::Tensor>& grad_weight,
                  const at::Tensor& grad_out,
                  const std::optional<at::Tensor>& grad_residual_out, const at::Tensor& input,
                  const at::Tensor& rstd, const std::optional<at::Tensor>& weight) {
  TORCH_CHECK(input.device().is_cpu(), "rms_norm_bwd: this is the CPU implementation, got input on ",
              input.device());
  const auto b = checks::prepare_bwd("rms_norm_bwd", grad_input, grad_weight, nullptr, grad_out,
                                     grad_residual_out, input, nullptr, rstd, weight,
                                     /*allow_double=*/true);
  norm_bwd(b, /*rms=*/true);
}

void silu_and_mul(at::Tensor& out, const at::Tensor& input) {
  TORCH_CHECK(input.device().is_cpu(), "silu_and_mul: this is the CPU implementation, got input on ",
              input.device());
  const auto s = checks::prepare_silu_and_mul(out, input, /*allow_double=*/true);
  if (s.rows == 0) {
    return;
  }
  const at::ScalarType dtype = input.scalar_type();
  const int64_t grain = row_grain(s.d, 3);
  advise_huge_pages(s.out, s.rows, s.out_stride, s.d);
#if defined(LAYER_NORM_HAVE_AVX512_UNIT)
  if (dtype != at::kDouble && avx512_enabled()) {
    const auto t = avx512_dtype(dtype);
    const bool native_bf16 = dtype == at::kBFloat16 && avx512_bf16_enabled();
    const bool stream = s.out.numel() * s.out.element_size() >= kStreamBytes;
    void* o = s.out.data_ptr();
    const char* i = static_cast<const char*>(s.input.const_data_ptr());
    const int64_t es = s.input.element_size();
    at::parallel_for(0, s.rows, grain, [&](int64_t begin, int64_t end) {
      void* ob = static_cast<char*>(o) + begin * s.out_stride * es;
      const void* ib = i + begin * s.input_stride * es;
      if (native_bf16) {
        layer_norm_avx512_bf16::silu_and_mul_rows(t, ob, ib, end - begin, s.d, s.out_stride,
                                                  s.input_stride, stream);
      } else {
        layer_norm_avx512::silu_and_mul_rows(t, ob, ib, end - begin, s.d, s.out_stride,
                                             s.input_stride, stream);
      }
    });
    return;
  }
#endif
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, dtype, "silu_and_mul_cpu", [&] {
    scalar_t* o = s.out.data_ptr<scalar_t>();
    const scalar_t* i = s.input.const_data_ptr<scalar_t>();
    at::parallel_for(0, s.rows, grain, [&](int64_t begin, int64_t end) {
      silu_rows_portable<scalar_t>(o + begin * s.out_stride, i + begin * s.input_stride,
                                   end - begin, s.d, s.out_stride, s.input_stride);
    });
  });
}

}  // namespace layer_norm_ops
