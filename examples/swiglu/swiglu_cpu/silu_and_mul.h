// CPU backend of the swiglu kernel.
#pragma once

#include <ATen/core/Tensor.h>

namespace swiglu {
namespace cpu {

// out[..., j] = silu(input[..., j]) * input[..., d + j] for j in [0, d), where
// input has shape (..., 2 * d) and out has shape (..., d). fp32, bf16 and fp16;
// 16-bit types are computed in fp32 and rounded once.
void silu_and_mul(at::Tensor& out, const at::Tensor& input);

// True when silu_and_mul uses the AVX-512 unit: the CPU supports
// AVX512F/BW/VL and FMA, and SWIGLU_DISABLE_AVX512 is unset, empty, "0",
// "false", "off" or "no". Decided once per process, on first use.
bool avx512_enabled();

}  // namespace cpu
}  // namespace swiglu
