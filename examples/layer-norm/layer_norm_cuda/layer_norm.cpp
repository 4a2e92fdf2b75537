// The torch glue of the CUDA and ROCm backends: argument checks (shared with
// every backend, common/norm_checks.h), device guard, current stream, dtype
// dispatch, workspace allocation. The kernels are in the torch-free .cu files;
// gpu_compat.h maps the CUDA/HIP names, so hipcc compiles this same file for
// the rocm unit without hipify. A .cpp, not a .cu: the host compiler parses
// torch's headers once, instead of nvcc once per architecture.
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>

#include <type_traits>

#include "common/norm_checks.h"
#include "gpu_compat.h"
#include "kernels.h"
#include "torch-ext/torch_binding.h"

namespace layer_norm_ops {
namespace {

template <typename scalar_t>
using dev_t = typename gpu_compat::device_type<scalar_t>::type;

template <typename scalar_t>
const dev_t<scalar_t>* dptr(const at::Tensor& t) {
  return t.defined() ? gpu_compat::device_ptr(t.const_data_ptr<scalar_t>()) : nullptr;
}

template <typename scalar_t>
dev_t<scalar_t>* mptr(const at::Tensor& t) {
  return t.defined() ? gpu_compat::device_ptr(t.data_ptr<scalar_t>()) : nullptr;
}

void check_gpu(const at::Tensor& input, const char* op) {
  TORCH_CHECK(input.device().is_cuda(), op,
              ": this is the CUDA/ROCm implementation, got input on ", input.device());
}

void norm_fwd(const checks::NormFwd& f, bool rms, double eps) {
  if (f.rows == 0) {
    return;
  }
  const gpu_compat::OptionalDeviceGuard guard(f.input.device());
  const gpu::stream_t stream = gpu_compat::current_stream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, f.input.scalar_type(), "norm_fwd_gpu", [&] {
        if constexpr (std::is_same_v<scalar_t, double>) {
          TORCH_CHECK(false, "layer-norm: float64 is supported on CPU only");
        } else {
          layer_norm_gpu::NormFwdArgs<dev_t<scalar_t>> a{};
          a.input = dptr<scalar_t>(f.input);
          a.input_stride = f.input_stride;
          a.residual = dptr<scalar_t>(f.residual);
          a.residual_stride = f.residual_stride;
          a.residual_out = mptr<scalar_t>(f.residual_out);
          a.residual_out_stride = f.residual_out_stride;
          a.out = mptr<scalar_t>(f.out);
          a.out_stride = f.out_stride;
          a.weight = dptr<scalar_t>(f.weight);
          a.bias = dptr<scalar_t>(f.bias);
          a.mean = f.mean.defined() ? f.mean.data_ptr<float>() : nullptr;
          a.rstd = f.rstd.data_ptr<float>();
          a.rows = f.rows;
          a.n = f.n;
          a.eps = static_cast<float>(eps);
          a.rms = rms;
          gpu_compat::check_launch(layer_norm_gpu::norm_fwd_launch(a, stream),
                                   rms ? "rms_norm_fwd kernel launch"
                                       : "layer_norm_fwd kernel launch");
        }
      });
}

void norm_bwd(const checks::NormBwd& b, bool rms) {
  if (b.rows == 0) {
    // No rows: the sums over rows are zero.
    if (b.grad_weight.defined()) {
      b.grad_weight.zero_();
    }
    if (b.grad_bias.defined()) {
      b.grad_bias.zero_();
    }
    return;
  }
  const gpu_compat::OptionalDeviceGuard guard(b.input.device());
  const gpu::stream_t stream = gpu_compat::current_stream();
  const int64_t blocks = layer_norm_gpu::norm_bwd_blocks(b.rows);
  // Per-block partial sums of grad_weight and grad_bias (from torch's caching
  // allocator, on this stream).
  const at::Tensor workspace =
      at::empty({blocks * 2 * b.n}, b.input.options().dtype(at::kFloat));
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, b.input.scalar_type(), "norm_bwd_gpu", [&] {
        if constexpr (std::is_same_v<scalar_t, double>) {
          TORCH_CHECK(false, "layer-norm: float64 is supported on CPU only");
        } else {
          layer_norm_gpu::NormBwdArgs<dev_t<scalar_t>> a{};
          a.grad_out = dptr<scalar_t>(b.grad_out);
          a.grad_out_stride = b.grad_out_stride;
          a.grad_residual_out = dptr<scalar_t>(b.grad_residual_out);
          a.grad_residual_out_stride = b.grad_residual_out_stride;
          a.input = dptr<scalar_t>(b.input);
          a.input_stride = b.input_stride;
          a.mean = b.mean.defined() ? b.mean.const_data_ptr<float>() : nullptr;
          a.rstd = b.rstd.const_data_ptr<float>();
          a.weight = dptr<scalar_t>(b.weight);
          a.grad_input = mptr<scalar_t>(b.grad_input);
          a.grad_input_stride = b.grad_input_stride;
          a.grad_weight = mptr<scalar_t>(b.grad_weight);
          a.grad_bias = mptr<scalar_t>(b.grad_bias);
          a.workspace = workspace.data_ptr<float>();
          a.blocks = blocks;
          a.rows = b.rows;
          a.n = b.n;
          a.rms = rms;
          gpu_compat::check_launch(layer_norm_gpu::norm_bwd_launch(a, stream),
                                   rms ? "rms_norm_bwd kernel launch"
                                       : "layer_norm_bwd kernel launch");
        }
      });
}

}  // namespace

void layer_norm_fwd(at::Tensor& out, const std::optional<at::Tensor>& residual_out,
                    at::Tensor& mean, at::Tensor& rstd, const at::Tensor& input,
                    const std::optional<at::Tensor>& residual,
                    const std::optional<at::Tensor>& weight,
                    const std::optional<at::Tensor>& bias, double eps) {
  check_gpu(input, "layer_norm_fwd");
  const auto f = checks::prepare_fwd("layer_norm_fwd", out, residual_out, &mean, rstd, input,
                                     residual, weight, bias, /*allow_double=*/false);
  norm_fwd(f, /*rms=*/false, eps);
}

void rms_norm_fwd(at::Tensor& out, const std::optional<at::Tensor>& residual_out,
                  at::Tensor& rstd, const at::Tensor& input,
                  const std::optional<at::Tensor>& residual,
                  const std::optional<at::Tensor>& weight, double eps) {
  check_gpu(input, "rms_norm_fwd");
  const auto f = checks::prepare_fwd("rms_norm_fwd", out, residual_out, nullptr, rstd, input,
                                     residual, weight, std::nullopt, /*allow_double=*/false);
  norm_fwd(f, /*rms=*/true, eps);
}

void layer_norm_bwd(at::Tensor& grad_input, const std::optional<at::Tensor>& grad_weight,
                    const std::optional<at::Tensor>& grad_bias, const at::Tensor& grad_out,
                    const std::optional<at::Tensor>& grad_residual_out,
                    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& rstd,
                    const std::optional<at::Tensor>& weight) {
  check_gpu(input, "layer_norm_bwd");
  const auto b = checks::prepare_bwd("layer_norm_bwd", grad_input, grad_weight, &grad_bias,
                                     grad_out, grad_residual_out, input, &mean, rstd, weight,
                                     /*allow_double=*/false);
  norm_bwd(b, /*rms=*/false);
}

void rms_norm_bwd(at::Tensor& grad_input, const std::optional<at::Tensor>& grad_weight,
                  const at::Tensor& grad_out,
                  const std::optional<at::Tensor>& grad_residual_out, const at::Tensor& input,
                  const at::Tensor& rstd, const std::optional<at::Tensor>& weight) {
  check_gpu(input, "rms_norm_bwd");
  const auto b = checks::prepare_bwd("rms_norm_bwd", grad_input, grad_weight, nullptr, grad_out,
                                     grad_residual_out, input, nullptr, rstd, weight,
                                     /*allow_double=*/false);
  norm_bwd(b, /*rms=*/true);
}

void silu_and_mul(at::Tensor& out, const at::Tensor& input) {
  check_gpu(input, "silu_and_mul");
  const auto s = checks::prepare_silu_and_mul(out, input, /*allow_double=*/false);
  if (s.rows == 0) {
    return;
  }
  const gpu_compat::OptionalDeviceGuard guard(input.device());
  const gpu::stream_t stream = gpu_compat::current_stream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, input.scalar_type(), "silu_and_mul_gpu", [&] {
        if constexpr (std::is_same_v<scalar_t, double>) {
          TORCH_CHECK(false, "layer-norm: float64 is supported on CPU only");
        } else {
          gpu_compat::check_launch(
              layer_norm_gpu::silu_and_mul_launch(mptr<scalar_t>(s.out), dptr<scalar_t>(s.input),
                                                  s.rows, s.d, s.out_stride, s.input_stride,
                                                  stream),
              "silu_and_mul kernel launch");
        }
      });
}

}  // namespace layer_norm_ops
