// scale_add for CUDA and ROCm: out = x + alpha * y. hipcc compiles this same
// file for the rocm unit; gpu_compat.h (next to this file) maps the
// runtime/stream names, so no hipify step is needed.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <torch/all.h>

#include <cstdint>

#include "gpu_compat.h"
#include "torch-ext/torch_binding.h"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

template <typename scalar_t>
__global__ void scale_add_kernel(scalar_t *__restrict__ out, const scalar_t *__restrict__ x,
                                 const scalar_t *__restrict__ y, at::opmath_type<scalar_t> alpha, int64_t n) {
  // bf16/fp16 are computed in float, fp32/fp64 as themselves.
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = static_cast<scalar_t>(static_cast<acc_t>(x[i]) + alpha * static_cast<acc_t>(y[i]));
  }
}

}  // namespace

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
  const bool direct = out.is_contiguous();
  torch::Tensor dst = direct ? out : torch::empty_like(xc);

  const int64_t n = xc.numel();
  if (n > 0) {
    const int64_t wanted = (n + kThreads - 1) / kThreads;
    const int blocks = static_cast<int>(wanted < kMaxBlocks ? wanted : kMaxBlocks);
    const gpu_compat::stream_t stream = gpu_compat::current_stream();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, xc.scalar_type(), "scale_add_gpu", [&] {
      using acc_t = at::opmath_type<scalar_t>;
      scale_add_kernel<scalar_t><<<blocks, kThreads, 0, stream>>>(
          dst.data_ptr<scalar_t>(), xc.const_data_ptr<scalar_t>(), yc.const_data_ptr<scalar_t>(),
          static_cast<acc_t>(alpha), n);
    });
    GPU_COMPAT_CHECK_LAUNCH("scale_add kernel launch");
  }

  if (!direct) {
    out.copy_(dst);
  }
}
