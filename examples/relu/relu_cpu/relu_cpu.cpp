// CPU ReLU: an OpenMP loop over the flattened tensor, for fp32, fp64, bf16
// and fp16. Half-precision values are compared in float (at::opmath_type).
#include <ATen/OpMathType.h>
#include <torch/all.h>

#include <cstdint>

#include "torch-ext/torch_binding.h"

namespace {

// Below this many elements the cost of waking OpenMP threads dominates.
constexpr int64_t kParallelThreshold = 1 << 15;

template <typename scalar_t>
void relu_kernel(scalar_t *__restrict__ out, const scalar_t *__restrict__ in,
                 int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) {
    using acc_t = at::opmath_type<scalar_t>;
    const acc_t v = static_cast<acc_t>(in[i]);
    // `v < 0` is false for NaN, so NaN propagates as in torch.relu.
    out[i] = static_cast<scalar_t>(v < acc_t(0) ? acc_t(0) : v);
  }
}

}  // namespace

void relu(torch::Tensor &out, torch::Tensor const &input) {
  TORCH_CHECK(input.device().is_cpu(), "relu: input must be a CPU tensor");
  TORCH_CHECK(out.device().is_cpu(), "relu: out must be a CPU tensor");
  TORCH_CHECK(out.scalar_type() == input.scalar_type(),
              "relu: out has dtype ", out.scalar_type(), " but input has ",
              input.scalar_type());
  TORCH_CHECK(out.sizes() == input.sizes(), "relu: out has shape ",
              out.sizes(), " but input has ", input.sizes());

  const torch::Tensor in = input.contiguous();
  const bool direct = out.is_contiguous();
  torch::Tensor dst = direct ? out : torch::empty_like(in);

  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::ScalarType::BFloat16, at::ScalarType::Half, in.scalar_type(),
      "relu_cpu", [&] {
        relu_kernel<scalar_t>(dst.data_ptr<scalar_t>(),
                              in.const_data_ptr<scalar_t>(), in.numel());
      });

  if (!direct) {
    out.copy_(dst);
  }
}
