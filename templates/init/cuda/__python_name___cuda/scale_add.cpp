// scale_add's torch glue for CUDA and ROCm: argument checks, device guard,
// current stream and the dtype dispatch. The kernel is in scale_add_kernel.cu,
// which includes no torch header; gpu_compat.h maps the CUDA/HIP names, so
// hipcc compiles this same file for the rocm unit without hipify.
#include <ATen/Dispatch.h>
#include <torch/all.h>

#include "gpu_compat.h"
#include "scale_add_kernel.h"
#include "torch-ext/torch_binding.h"

void scale_add(torch::Tensor &out, const torch::Tensor &x, const torch::Tensor &y, double alpha) {
  TORCH_CHECK(x.is_cuda(), "scale_add: x must be a GPU tensor");
  TORCH_CHECK(y.device() == x.device() && out.device() == x.device(),
              "scale_add: out, x and y must be on the same device");
  TORCH_CHECK(x.sizes() == y.sizes() && x.sizes() == out.sizes(),
              "scale_add: out, x and y must have the same shape (got ", out.sizes(), ", ", x.sizes(), ", ",
              y.sizes(), ")");
  TORCH_CHECK(x.scalar_type() == y.scalar_type() && x.scalar_type() == out.scalar_type(),
              "scale_add: out, x and y must have the same dtype");

  const gpu_compat::OptionalDeviceGuard guard(x.device());
  const torch::Tensor xc = x.contiguous();
  const torch::Tensor yc = y.contiguous();
  // The kernel writes contiguous memory: a strided `out` gets a copy.
  const bool direct = out.is_contiguous();
  torch::Tensor dst = direct ? out : torch::empty_like(xc);

  const gpu::stream_t stream = gpu_compat::current_stream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, xc.scalar_type(), "scale_add_gpu", [&] {
    gpu_compat::check_launch(scale_add_launch(gpu_compat::device_ptr(dst.data_ptr<scalar_t>()),
                                              gpu_compat::device_ptr(xc.const_data_ptr<scalar_t>()),
                                              gpu_compat::device_ptr(yc.const_data_ptr<scalar_t>()), alpha,
                                              xc.numel(), stream),
                             "scale_add kernel launch");
  });

  if (!direct) {
    out.copy_(dst);
  }
}
