// ReLU for Intel GPUs: a SYCL parallel_for on torch's current XPU queue.
// Compiled with icpx -fsycl.
#include <torch/all.h>

#include <c10/core/DeviceGuard.h>
#include <c10/xpu/XPUStream.h>
#include <sycl/sycl.hpp>

#include <cstdint>

#include "torch-ext/torch_binding.h"

namespace {

template <typename scalar_t>
void relu_typed(sycl::queue &queue, torch::Tensor &dst,
                const torch::Tensor &src) {
  scalar_t *out = dst.data_ptr<scalar_t>();
  const scalar_t *in = src.const_data_ptr<scalar_t>();
  const int64_t n = src.numel();
  queue.parallel_for(sycl::range<1>(static_cast<size_t>(n)),
                     [=](sycl::id<1> idx) {
                       const size_t i = idx[0];
                       const float v = static_cast<float>(in[i]);
                       // `v < 0` is false for NaN, so NaN propagates.
                       out[i] = static_cast<scalar_t>(v < 0.0f ? 0.0f : v);
                     });
}

}  // namespace

void relu(torch::Tensor &out, torch::Tensor const &input) {
  TORCH_CHECK(input.device().is_xpu(), "relu: input must be an XPU tensor");
  TORCH_CHECK(out.device() == input.device(),
              "relu: out and input must be on the same device");
  TORCH_CHECK(out.scalar_type() == input.scalar_type(),
              "relu: out has dtype ", out.scalar_type(), " but input has ",
              input.scalar_type());
  TORCH_CHECK(out.sizes() == input.sizes(), "relu: out has shape ",
              out.sizes(), " but input has ", input.sizes());

  const c10::DeviceGuard guard(input.device());
  const torch::Tensor in = input.contiguous();
  const bool direct = out.is_contiguous();
  torch::Tensor dst = direct ? out : torch::empty_like(in);

  const int64_t n = in.numel();
  if (n > 0) {
    sycl::queue &queue =
        c10::xpu::getCurrentXPUStream(in.device().index()).queue();
    // fp64 is optional on Intel GPUs, so only float/half/bfloat16 are built.
    AT_DISPATCH_SWITCH(
        in.scalar_type(), "relu_xpu",
        AT_DISPATCH_CASE(at::ScalarType::Float,
                         [&] { relu_typed<scalar_t>(queue, dst, in); })
        AT_DISPATCH_CASE(at::ScalarType::Half,
                         [&] { relu_typed<scalar_t>(queue, dst, in); })
        AT_DISPATCH_CASE(at::ScalarType::BFloat16,
                         [&] { relu_typed<scalar_t>(queue, dst, in); }));
  }

  if (!direct) {
    out.copy_(dst);
  }
}
