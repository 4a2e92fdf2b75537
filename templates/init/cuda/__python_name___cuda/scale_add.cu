#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/all.h>

#include "gpu_compat.h"
#include "torch-ext/torch_binding.h"

template <typename scalar_t>
__global__ void scale_add_kernel(scalar_t *__restrict__ out, const scalar_t *__restrict__ x,
                                 const scalar_t *__restrict__ y, float alpha, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    out[i] = static_cast<scalar_t>(static_cast<float>(x[i]) + alpha * static_cast<float>(y[i]));
  }
}

void scale_add(torch::Tensor &out, const torch::Tensor &x, const torch::Tensor &y, double alpha) {
  TORCH_CHECK(x.is_cuda() && y.is_cuda() && out.is_cuda(), "scale_add: tensors must be on the GPU");
  TORCH_CHECK(x.sizes() == y.sizes() && x.sizes() == out.sizes(), "scale_add: out, x and y must have the same shape");
  TORCH_CHECK(x.is_contiguous() && y.is_contiguous() && out.is_contiguous(), "scale_add: tensors must be contiguous");
  const at::cuda::OptionalCUDAGuard guard(x.device());
  const int64_t n = x.numel();
  if (n == 0) return;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "scale_add", [&] {
    scale_add_kernel<scalar_t><<<blocks, threads, 0, stream>>>(out.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(),
                                                               y.data_ptr<scalar_t>(), static_cast<float>(alpha), n);
  });
  GPU_LAUNCH_CHECK();
}
