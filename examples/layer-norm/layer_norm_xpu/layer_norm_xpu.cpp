// LayerNorm / RMSNorm forward and backward, and silu_and_mul, for Intel GPUs:
// SYCL kernels on torch's current XPU queue (compiled with icpx -fsycl).
//
// The algorithm follows the CUDA and Metal kernels: one work-group per row;
// sweep 1 reads the row once (forming s = x + residual, rounded to the element
// type, when a residual is fused) and the group reduces sum(s) or sum(s^2);
// LayerNorm corrects mean and variance with sums of s - mean (the corrected
// two-pass algorithm, reading the row again from the cache); the last sweep
// writes the output. All arithmetic is fp32; RMSNorm rounds the normalized
// value to the element type before the weight multiply, as LlamaRMSNorm does.
// Backward: a row kernel writes grad_input, a column kernel sums grad_weight
// and grad_bias over the rows (one work-item per column, deterministic).
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>
#include <c10/xpu/XPUStream.h>
#include <sycl/sycl.hpp>

#include <cstdint>

#include "common/norm_checks.h"
#include "torch-ext/torch_binding.h"

namespace layer_norm_ops {
namespace {

constexpr int64_t kMaxGroup = 256;
constexpr int64_t kSubGroup = 32;

// Work-group size for a row of n elements: a multiple of 32, at most 256.
size_t group_size(int64_t n) {
  const int64_t wanted = (n + kSubGroup - 1) / kSubGroup * kSubGroup;
  return static_cast<size_t>(wanted < kMaxGroup ? wanted : kMaxGroup);
}

template <typename scalar_t>
float round_to(float v) {
  return static_cast<float>(static_cast<scalar_t>(v));
}

sycl::queue& queue_for(const at::Tensor& t) {
  return c10::xpu::getCurrentXPUStream(t.device().index()).queue();
}

void check_xpu(const at::Tensor& input, const char* op) {
  TORCH_CHECK(input.device().is_xpu(), op, ": this is the XPU implementation, got input on ",
              input.device());
}

// ---- forward -------------------------------------------------------------------

template <typename scalar_t>
void norm_fwd_typed(const checks::NormFwd& f, bool rms, float eps) {
  const scalar_t* input = f.input.const_data_ptr<scalar_t>();
  const scalar_t* residual = f.residual.defined() ? f.residual.const_data_ptr<scalar_t>() : nullptr;
  scalar_t* residual_out = f.residual_out.defined() ? f.residual_out.data_ptr<scalar_t>() : nullptr;
  scalar_t* out = f.out.data_ptr<scalar_t>();
  const scalar_t* weight = f.weight.defined() ? f.weight.const_data_ptr<scalar_t>() : nullptr;
  const scalar_t* bias = f.bias.defined() ? f.bias.const_data_ptr<scalar_t>() : nullptr;
  float* mean_out = f.mean.defined() ? f.mean.data_ptr<float>() : nullptr;
  float* rstd_out = f.rstd.data_ptr<float>();
  const int64_t n = f.n;
  const int64_t input_stride = f.input_stride;
  const int64_t residual_stride = f.residual_stride;
  const int64_t residual_out_stride = f.residual_out_stride;
  const int64_t out_stride = f.out_stride;
  const size_t group = group_size(n);
  const float inv_n = 1.0f / static_cast<float>(n);

  queue_for(f.input).parallel_for(
      sycl::nd_range<1>(static_cast<size_t>(f.rows) * group, group), [=](sycl::nd_item<1> it) {
        const int64_t row = static_cast<int64_t>(it.get_group(0));
        const int64_t tid = static_cast<int64_t>(it.get_local_id(0));
        const int64_t step = static_cast<int64_t>(it.get_local_range(0));
        const auto g = it.get_group();
        const scalar_t* x = input + row * input_stride;
        const scalar_t* res = residual != nullptr ? residual + row * residual_stride : nullptr;
        scalar_t* res_out = residual != nullptr ? residual_out + row * residual_out_stride : nullptr;
        // Later sweeps read s: residual_out (written by this same work-item at
        // the same index) or the input.
        const scalar_t* s = res_out != nullptr ? res_out : x;

        float acc = 0.0f;
        for (int64_t j = tid; j < n; j += step) {
          float v = static_cast<float>(x[j]);
          if (res != nullptr) {
            const scalar_t rounded = static_cast<scalar_t>(v + static_cast<float>(res[j]));
            res_out[j] = rounded;
            v = static_cast<float>(rounded);
          }
          acc += rms ? v * v : v;
        }
        const float total = sycl::reduce_over_group(g, acc, sycl::plus<float>());
        float mean = 0.0f;
        float var;
        if (rms) {
          var = total * inv_n;
        } else {
          mean = total * inv_n;
          float acc_d = 0.0f;
          float acc_d2 = 0.0f;
          for (int64_t j = tid; j < n; j += step) {
            const float d = static_cast<float>(s[j]) - mean;
            acc_d += d;
            acc_d2 += d * d;
          }
          const float shift = sycl::reduce_over_group(g, acc_d, sycl::plus<float>()) * inv_n;
          mean += shift;
          var = sycl::fmax(
              sycl::reduce_over_group(g, acc_d2, sycl::plus<float>()) * inv_n - shift * shift, 0.0f);
        }
        const float rstd = 1.0f / sycl::sqrt(var + eps);
        if (tid == 0) {
          if (!rms) {
            mean_out[row] = mean;
          }
          rstd_out[row] = rstd;
        }
        scalar_t* y = out + row * out_stride;
        for (int64_t j = tid; j < n; j += step) {
          const float v = static_cast<float>(s[j]);
          float o;
          if (rms) {
            o = round_to<scalar_t>(v * rstd);  // LlamaRMSNorm: weight * normed.to(dtype)
            if (weight != nullptr) {
              o *= static_cast<float>(weight[j]);
            }
          } else {
            o = (v - mean) * rstd;
            if (weight != nullptr) {
              o *= static_cast<float>(weight[j]);
            }
            if (bias != nullptr) {
              o += static_cast<float>(bias[j]);
            }
          }
          y[j] = static_cast<scalar_t>(o);
        }
      });
}

// ---- backward ------------------------------------------------------------------

template <typename scalar_t>
void norm_bwd_typed(const checks::NormBwd& b, bool rms) {
  const scalar_t* grad_out = b.grad_out.const_data_ptr<scalar_t>();
  const scalar_t* grad_res =
      b.grad_residual_out.defined() ? b.grad_residual_out.const_data_ptr<scalar_t>() : nullptr;
  const scalar_t* input = b.input.const_data_ptr<scalar_t>();
  const float* mean_in = b.mean.defined() ? b.mean.const_data_ptr<float>() : nullptr;
  const float* rstd_in = b.rstd.const_data_ptr<float>();
  const scalar_t* weight = b.weight.defined() ? b.weight.const_data_ptr<scalar_t>() : nullptr;
  scalar_t* grad_input = b.grad_input.data_ptr<scalar_t>();
  scalar_t* grad_weight = b.grad_weight.defined() ? b.grad_weight.data_ptr<scalar_t>() : nullptr;
  scalar_t* grad_bias = b.grad_bias.defined() ? b.grad_bias.data_ptr<scalar_t>() : nullptr;
  const int64_t rows = b.rows;
  const int64_t n = b.n;
  const int64_t input_stride = b.input_stride;
  const int64_t grad_out_stride = b.grad_out_stride;
  const int64_t grad_res_stride = b.grad_residual_out_stride;
  const int64_t grad_input_stride = b.grad_input_stride;
  const size_t group = group_size(n);
  const float inv_n = 1.0f / static_cast<float>(n);
  sycl::queue& queue = queue_for(b.input);

  queue.parallel_for(
      sycl::nd_range<1>(static_cast<size_t>(rows) * group, group), [=](sycl::nd_item<1> it) {
        const int64_t row = static_cast<int64_t>(it.get_group(0));
        const int64_t tid = static_cast<int64_t>(it.get_local_id(0));
        const int64_t step = static_cast<int64_t>(it.get_local_range(0));
        const auto g = it.get_group();
        const scalar_t* x = input + row * input_stride;
        const scalar_t* dy = grad_out + row * grad_out_stride;
        const float mean = rms ? 0.0f : mean_in[row];
        const float rstd = rstd_in[row];
        float sum_g = 0.0f;
        float sum_gx = 0.0f;
        for (int64_t j = tid; j < n; j += step) {
          const float xhat = (static_cast<float>(x[j]) - mean) * rstd;
          const float d = static_cast<float>(dy[j]);
          const float gj = weight != nullptr ? d * static_cast<float>(weight[j]) : d;
          sum_g += gj;
          sum_gx += gj * xhat;
        }
        const float c1 = sycl::reduce_over_group(g, sum_gx, sycl::plus<float>()) * inv_n;
        const float c2 = rms ? 0.0f : sycl::reduce_over_group(g, sum_g, sycl::plus<float>()) * inv_n;
        scalar_t* dx = grad_input + row * grad_input_stride;
        const scalar_t* dres = grad_res != nullptr ? grad_res + row * grad_res_stride : nullptr;
        for (int64_t j = tid; j < n; j += step) {
          const float xhat = (static_cast<float>(x[j]) - mean) * rstd;
          const float d = static_cast<float>(dy[j]);
          const float gj = weight != nullptr ? d * static_cast<float>(weight[j]) : d;
          float v = rstd * (gj - c2 - xhat * c1);
          if (dres != nullptr) {
            v += static_cast<float>(dres[j]);
          }
          dx[j] = static_cast<scalar_t>(v);
        }
      });

  if (grad_weight != nullptr || grad_bias != nullptr) {
    // grad_weight[j] = sum of grad_out * xhat (RMSNorm: xhat rounded to the
    // dtype, which is what the weight multiplied); grad_bias[j] = sum of grad_out.
    queue.parallel_for(sycl::range<1>(static_cast<size_t>(n)), [=](sycl::id<1> idx) {
      const int64_t j = static_cast<int64_t>(idx[0]);
      float dw = 0.0f;
      float db = 0.0f;
      for (int64_t r = 0; r < rows; ++r) {
        const float d = static_cast<float>(grad_out[r * grad_out_stride + j]);
        const float xhat =
            (static_cast<float>(input[r * input_stride + j]) - (rms ? 0.0f : mean_in[r])) * rstd_in[r];
        dw += d * (rms ? round_to<scalar_t>(xhat) : xhat);
        db += d;
      }
      if (grad_weight != nullptr) {
        grad_weight[j] = static_cast<scalar_t>(dw);
      }
      if (grad_bias != nullptr) {
        grad_bias[j] = static_cast<scalar_t>(db);
      }
    });
  }
}

// ---- silu_and_mul ----------------------------------------------------------------

template <typename scalar_t>
void silu_and_mul_typed(const checks::SiluAndMul& s) {
  scalar_t* out = s.out.data_ptr<scalar_t>();
  const scalar_t* in = s.input.const_data_ptr<scalar_t>();
  const int64_t d = s.d;
  const int64_t in_stride = s.input_stride;
  const int64_t out_stride = s.out_stride;
  queue_for(s.input).parallel_for(
      sycl::range<2>(static_cast<size_t>(s.rows), static_cast<size_t>(d)), [=](sycl::id<2> idx) {
        const int64_t row = static_cast<int64_t>(idx[0]);
        const int64_t j = static_cast<int64_t>(idx[1]);
        const float g = static_cast<float>(in[row * in_stride + j]);
        const float u = static_cast<float>(in[row * in_stride + d + j]);
        // sigmoid from e = exp(-|g|): no overflow for large |g|.
        const float e = sycl::exp(-sycl::fabs(g));
        const float inv = 1.0f / (1.0f + e);
        const float sigmoid = g < 0.0f ? e * inv : inv;
        out[row * out_stride + j] = static_cast<scalar_t>(g * sigmoid * u);
      });
}

// fp64 is optional on Intel GPUs: float, half and bfloat16 only.
#define LAYER_NORM_XPU_DISPATCH(dtype, name, ...)                                 \
  AT_DISPATCH_SWITCH(dtype, name,                                                  \
                     AT_DISPATCH_CASE(at::ScalarType::Float, __VA_ARGS__)          \
                     AT_DISPATCH_CASE(at::ScalarType::Half, __VA_ARGS__)           \
                     AT_DISPATCH_CASE(at::ScalarType::BFloat16, __VA_ARGS__))

}  // namespace

void layer_norm_fwd(at::Tensor& out, const std::optional<at::Tensor>& residual_out,
                    at::Tensor& mean, at::Tensor& rstd, const at::Tensor& input,
                    const std::optional<at::Tensor>& residual,
                    const std::optional<at::Tensor>& weight,
                    const std::optional<at::Tensor>& bias, double eps) {
  check_xpu(input, "layer_norm_fwd");
  const auto f = checks::prepare_fwd("layer_norm_fwd", out, residual_out, &mean, rstd, input,
                                     residual, weight, bias, /*allow_double=*/false);
  if (f.rows == 0) {
    return;
  }
  const c10::DeviceGuard guard(input.device());
  LAYER_NORM_XPU_DISPATCH(f.input.scalar_type(), "layer_norm_fwd_xpu",
                          [&] { norm_fwd_typed<scalar_t>(f, false, static_cast<float>(eps)); });
}

void rms_norm_fwd(at::Tensor& out, const std::optional<at::Tensor>& residual_out,
                  at::Tensor& rstd, const at::Tensor& input,
                  const std::optional<at::Tensor>& residual,
                  const std::optional<at::Tensor>& weight, double eps) {
  check_xpu(input, "rms_norm_fwd");
  const auto f = checks::prepare_fwd("rms_norm_fwd", out, residual_out, nullptr, rstd, input,
                                     residual, weight, std::nullopt, /*allow_double=*/false);
  if (f.rows == 0) {
    return;
  }
  const c10::DeviceGuard guard(input.device());
  LAYER_NORM_XPU_DISPATCH(f.input.scalar_type(), "rms_norm_fwd_xpu",
                          [&] { norm_fwd_typed<scalar_t>(f, true, static_cast<float>(eps)); });
}

namespace {
void norm_bwd(const checks::NormBwd& b, bool rms) {
  if (b.rows == 0) {
    if (b.grad_weight.defined()) {
      b.grad_weight.zero_();
    }
    if (b.grad_bias.defined()) {
      b.grad_bias.zero_();
    }
    return;
  }
  const c10::DeviceGuard guard(b.input.device());
  LAYER_NORM_XPU_DISPATCH(b.input.scalar_type(), "norm_bwd_xpu",
                          [&] { norm_bwd_typed<scalar_t>(b, rms); });
}
}  // namespace

void layer_norm_bwd(at::Tensor& grad_input, const std::optional<at::Tensor>& grad_weight,
                    const std::optional<at::Tensor>& grad_bias, const at::Tensor& grad_out,
                    const std::optional<at::Tensor>& grad_residual_out,
                    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& rstd,
                    const std::optional<at::Tensor>& weight) {
  check_xpu(input, "layer_norm_bwd");
  const auto b = checks::prepare_bwd("layer_norm_bwd", grad_input, grad_weight, &grad_bias,
                                     grad_out, grad_residual_out, input, &mean, rstd, weight,
                                     /*allow_double=*/false);
  norm_bwd(b, /*rms=*/false);
}

void rms_norm_bwd(at::Tensor& grad_input, const std::optional<at::Tensor>& grad_weight,
                  const at::Tensor& grad_out,
                  const std::optional<at::Tensor>& grad_residual_out, const at::Tensor& input,
                  const at::Tensor& rstd, const std::optional<at::Tensor>& weight) {
  check_xpu(input, "rms_norm_bwd");
  const auto b = checks::prepare_bwd("rms_norm_bwd", grad_input, grad_weight, nullptr, grad_out,
                                     grad_residual_out, input, nullptr, rstd, weight,
                                     /*allow_double=*/false);
  norm_bwd(b, /*rms=*/true);
}

void silu_and_mul(at::Tensor& out, const at::Tensor& input) {
  check_xpu(input, "silu_and_mul");
  const auto s = checks::prepare_silu_and_mul(out, input, /*allow_double=*/false);
  if (s.rows == 0) {
    return;
  }
  const c10::DeviceGuard guard(input.device());
  LAYER_NORM_XPU_DISPATCH(input.scalar_type(), "silu_and_mul_xpu",
                          [&] { silu_and_mul_typed<scalar_t>(s); });
}

}  // namespace layer_norm_ops
