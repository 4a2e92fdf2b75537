// relu's torch glue for CUDA and ROCm: argument checks, device guard, current
// stream and the dtype dispatch. The kernel is in relu_kernel.cu, which
// includes no torch header; gpu_compat.h maps the CUDA/HIP names, so hipcc
// compiles this same file for the rocm unit without hipify.
#include <ATen/Dispatch.h>
#include <torch/all.h>

#include "gpu_compat.h"
#include "relu_kernel.h"
#include "torch-ext/torch_binding.h"

void relu(torch::Tensor &out, torch::Tensor const &input) {
  TORCH_CHECK(input.device().is_cuda(), "relu: input must be a GPU tensor");
  TORCH_CHECK(out.device() == input.device(),
              "relu: out and input must be on the same device");
  TORCH_CHECK(out.scalar_type() == input.scalar_type(),
              "relu: out has dtype ", out.scalar_type(), " but input has ",
              input.scalar_type());
  TORCH_CHECK(out.sizes() == input.sizes(), "relu: out has shape ",
              out.sizes(), " but input has ", input.sizes());

  const gpu_compat::OptionalDeviceGuard guard(input.device());
  const torch::Tensor in = input.contiguous();
  // The kernel writes contiguous memory: a strided `out` gets a copy.
  const bool direct = out.is_contiguous();
  torch::Tensor dst = direct ? out : torch::empty_like(in);

  const gpu::stream_t stream = gpu_compat::current_stream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::ScalarType::BFloat16, at::ScalarType::Half, in.scalar_type(),
      "relu_gpu", [&] {
        gpu_compat::check_launch(
            relu_launch(gpu_compat::device_ptr(dst.data_ptr<scalar_t>()),
                        gpu_compat::device_ptr(in.const_data_ptr<scalar_t>()),
                        in.numel(), stream),
            "relu kernel launch");
      });

  if (!direct) {
    out.copy_(dst);
  }
}
