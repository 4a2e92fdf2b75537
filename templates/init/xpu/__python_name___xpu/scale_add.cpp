#include <ATen/Dispatch.h>
#include <c10/xpu/XPUStream.h>
#include <sycl/sycl.hpp>
#include <torch/all.h>

#include "torch-ext/torch_binding.h"

void scale_add(torch::Tensor &out, const torch::Tensor &x, const torch::Tensor &y, double alpha) {
  TORCH_CHECK(x.device().is_xpu(), "scale_add: tensors must be on the XPU");
  TORCH_CHECK(x.sizes() == y.sizes() && x.sizes() == out.sizes(), "scale_add: out, x and y must have the same shape");
  TORCH_CHECK(x.is_contiguous() && y.is_contiguous() && out.is_contiguous(), "scale_add: tensors must be contiguous");
  sycl::queue &queue = c10::xpu::getCurrentXPUStream().queue();
  const int64_t n = x.numel();
  const float a = static_cast<float>(alpha);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "scale_add", [&] {
    scalar_t *o = out.data_ptr<scalar_t>();
    const scalar_t *px = x.data_ptr<scalar_t>();
    const scalar_t *py = y.data_ptr<scalar_t>();
    queue.parallel_for(sycl::range<1>(n), [=](sycl::id<1> i) {
      o[i] = static_cast<scalar_t>(static_cast<float>(px[i]) + a * static_cast<float>(py[i]));
    });
  });
}
