// CUDA backend of the swiglu kernel.
#pragma once

#include <ATen/core/Tensor.h>

namespace swiglu {
namespace cuda {

// out[..., j] = silu(input[..., j]) * input[..., d + j] for j in [0, d), where
// input has shape (..., 2 * d) and out has shape (..., d). fp32, bf16 and fp16;
// 16-bit types are computed in fp32 and rounded once. Runs on the current
// stream of input's device.
void silu_and_mul(at::Tensor& out, const at::Tensor& input);

}  // namespace cuda
}  // namespace swiglu
