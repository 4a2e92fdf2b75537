#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/all.h>

#include "torch-ext/torch_binding.h"

template <typename scalar_t>
static void scale_add_kernel(scalar_t *out, const scalar_t *x, const scalar_t *y, float alpha, int64_t n) {
  at::parallel_for(0, n, 4096, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      out[i] = static_cast<scalar_t>(static_cast<float>(x[i]) + alpha * static_cast<float>(y[i]));
    }
  });
}

void scale_add(torch::Tensor &out, const torch::Tensor &x, const torch::Tensor &y, double alpha) {
  TORCH_CHECK(x.sizes() == y.sizes() && x.sizes() == out.sizes(), "scale_add: out, x and y must have the same shape");
  TORCH_CHECK(x.dtype() == y.dtype() && x.dtype() == out.dtype(), "scale_add: out, x and y must have the same dtype");
  TORCH_CHECK(x.is_contiguous() && y.is_contiguous() && out.is_contiguous(), "scale_add: tensors must be contiguous");
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "scale_add", [&] {
    scale_add_kernel<scalar_t>(out.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                               static_cast<float>(alpha), x.numel());
  });
}
