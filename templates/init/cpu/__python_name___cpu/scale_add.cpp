// CPU scale_add: out = x + alpha * y as one OpenMP loop over the flattened
// tensors, for fp32, fp64, bf16 and fp16. bf16/fp16 are computed in float
// (at::opmath_type), fp64 in double.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <torch/all.h>

#include <cstdint>

#include "torch-ext/torch_binding.h"

namespace {

// Below this many elements the cost of waking OpenMP threads dominates.
constexpr int64_t kParallelThreshold = 1 << 15;

template <typename scalar_t>
void scale_add_kernel(scalar_t *__restrict__ out, const scalar_t *__restrict__ x,
                      const scalar_t *__restrict__ y, double alpha, int64_t n) {
  using acc_t = at::opmath_type<scalar_t>;
  const acc_t a = static_cast<acc_t>(alpha);
#pragma omp parallel for simd schedule(static) if (n >= kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<scalar_t>(static_cast<acc_t>(x[i]) + a * static_cast<acc_t>(y[i]));
  }
}

}  // namespace

void scale_add(torch::Tensor &out, const torch::Tensor &x, const torch::Tensor &y, double alpha) {
  TORCH_CHECK(x.device().is_cpu() && y.device().is_cpu() && out.device().is_cpu(),
              "scale_add: out, x and y must be CPU tensors");
  TORCH_CHECK(x.sizes() == y.sizes() && x.sizes() == out.sizes(),
              "scale_add: out, x and y must have the same shape (got ", out.sizes(), ", ", x.sizes(), ", ",
              y.sizes(), ")");
  TORCH_CHECK(x.scalar_type() == y.scalar_type() && x.scalar_type() == out.scalar_type(),
              "scale_add: out, x and y must have the same dtype (got ", out.scalar_type(), ", ", x.scalar_type(),
              ", ", y.scalar_type(), ")");

  // Strided inputs are made contiguous; a strided `out` gets the result copied in.
  const torch::Tensor xc = x.contiguous();
  const torch::Tensor yc = y.contiguous();
  const bool direct = out.is_contiguous();
  torch::Tensor dst = direct ? out : torch::empty_like(xc);

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, xc.scalar_type(), "scale_add_cpu", [&] {
    scale_add_kernel<scalar_t>(dst.data_ptr<scalar_t>(), xc.const_data_ptr<scalar_t>(),
                               yc.const_data_ptr<scalar_t>(), alpha, xc.numel());
  });

  if (!direct) {
    out.copy_(dst);
  }
}
