// scale_add for Intel GPUs: out = x + alpha * y as a SYCL parallel_for on
// torch's current XPU queue. Compiled with icpx -fsycl.
#include <ATen/Dispatch.h>
#include <c10/core/DeviceGuard.h>
#include <c10/xpu/XPUStream.h>
#include <sycl/sycl.hpp>
#include <torch/all.h>

#include <cstdint>

#include "torch-ext/torch_binding.h"

namespace {

template <typename scalar_t>
void scale_add_typed(sycl::queue &queue, torch::Tensor &dst, const torch::Tensor &x, const torch::Tensor &y,
                     float alpha) {
  scalar_t *out = dst.data_ptr<scalar_t>();
  const scalar_t *px = x.const_data_ptr<scalar_t>();
  const scalar_t *py = y.const_data_ptr<scalar_t>();
  queue.parallel_for(sycl::range<1>(static_cast<size_t>(x.numel())), [=](sycl::id<1> idx) {
    const size_t i = idx[0];
    out[i] = static_cast<scalar_t>(static_cast<float>(px[i]) + alpha * static_cast<float>(py[i]));
  });
}

}  // namespace

void scale_add(torch::Tensor &out, const torch::Tensor &x, const torch::Tensor &y, double alpha) {
  TORCH_CHECK(x.device().is_xpu(), "scale_add: x must be an XPU tensor");
  TORCH_CHECK(y.device() == x.device() && out.device() == x.device(),
              "scale_add: out, x and y must be on the same device");
  TORCH_CHECK(x.sizes() == y.sizes() && x.sizes() == out.sizes(),
              "scale_add: out, x and y must have the same shape (got ", out.sizes(), ", ", x.sizes(), ", ",
              y.sizes(), ")");
  TORCH_CHECK(x.scalar_type() == y.scalar_type() && x.scalar_type() == out.scalar_type(),
              "scale_add: out, x and y must have the same dtype");

  const c10::DeviceGuard guard(x.device());
  const torch::Tensor xc = x.contiguous();
  const torch::Tensor yc = y.contiguous();
  const bool direct = out.is_contiguous();
  torch::Tensor dst = direct ? out : torch::empty_like(xc);

  if (xc.numel() > 0) {
    sycl::queue &queue = c10::xpu::getCurrentXPUStream(xc.device().index()).queue();
    const float a = static_cast<float>(alpha);
    // fp64 is optional on Intel GPUs, so only float/half/bfloat16 are built.
    AT_DISPATCH_SWITCH(xc.scalar_type(), "scale_add_xpu",
                       AT_DISPATCH_CASE(at::kFloat, [&] { scale_add_typed<scalar_t>(queue, dst, xc, yc, a); })
                       AT_DISPATCH_CASE(at::kHalf, [&] { scale_add_typed<scalar_t>(queue, dst, xc, yc, a); })
                       AT_DISPATCH_CASE(at::kBFloat16, [&] { scale_add_typed<scalar_t>(queue, dst, xc, yc, a); }));
  }

  if (!direct) {
    out.copy_(dst);
  }
}
