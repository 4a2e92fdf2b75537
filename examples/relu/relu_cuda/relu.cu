// ReLU for CUDA and ROCm. hipcc compiles this same file for the rocm unit;
// gpu_compat.h (next to this file) maps the runtime/stream names.
#include <ATen/OpMathType.h>
#include <torch/all.h>

#include <cstdint>

#include "gpu_compat.h"
#include "torch-ext/torch_binding.h"

namespace {

constexpr int kThreads = 256;

template <typename scalar_t>
__global__ void relu_kernel(scalar_t *__restrict__ out,
                            const scalar_t *__restrict__ in, int64_t n) {
  // Half and bfloat16 are compared in float, float and double as themselves.
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    const acc_t v = static_cast<acc_t>(in[i]);
    // `v < 0` is false for NaN, so NaN propagates as in torch.relu.
    out[i] = static_cast<scalar_t>(v < acc_t(0) ? acc_t(0) : v);
  }
}

}  // namespace

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
  const bool direct = out.is_contiguous();
  torch::Tensor dst = direct ? out : torch::empty_like(in);

  const int64_t n = in.numel();
  if (n > 0) {
    const int64_t wanted = (n + kThreads - 1) / kThreads;
    const int blocks = static_cast<int>(wanted < 65535 ? wanted : 65535);
    const gpu_compat::stream_t stream = gpu_compat::current_stream();
    AT_DISPATCH_FLOATING_TYPES_AND2(
        at::ScalarType::BFloat16, at::ScalarType::Half, in.scalar_type(),
        "relu_cuda", [&] {
          relu_kernel<scalar_t><<<blocks, kThreads, 0, stream>>>(
              dst.data_ptr<scalar_t>(), in.const_data_ptr<scalar_t>(), n);
        });
    GPU_COMPAT_CHECK_LAUNCH("relu kernel launch");
  }

  if (!direct) {
    out.copy_(dst);
  }
}
