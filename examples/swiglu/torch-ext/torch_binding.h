// The functions that torch_binding.cpp registers as ops. Every backend's glue
// defines act_and_mul and act_and_mul_backward (swiglu_cpu/, swiglu_cuda/ for
// CUDA and ROCm, swiglu_metal/, swiglu_xpu/); a variant compiles exactly one
// backend, selected by the CPU_KERNEL, CUDA_KERNEL, ROCM_KERNEL, METAL_KERNEL
// or XPU_KERNEL define.
#pragma once

#include <ATen/core/Tensor.h>

#include "swiglu_common/activations.h"

namespace swiglu {

// out = act(input[..., :d]) * input[..., d:], input of shape (..., 2 * d), out
// of shape (..., d); fp32, bf16 and fp16, 16-bit types computed in fp32 and
// rounded once. Any layout (see swiglu_common/torch_args.h).
void act_and_mul(Activation act, at::Tensor& out, const at::Tensor& input);

// The gradient of act_and_mul with respect to input, from the gradient of out:
// grad_input[..., :d] = grad_out * up * act'(gate),
// grad_input[..., d:] = grad_out * act(gate).
void act_and_mul_backward(Activation act, at::Tensor& grad_input,
                          const at::Tensor& grad_out, const at::Tensor& input);

#if defined(CPU_KERNEL)
namespace cpu {
// True when the CPU ops use the AVX-512 unit: the CPU supports AVX512F/BW/VL
// and FMA, and SWIGLU_DISABLE_AVX512 is unset, empty, "0", "false", "off" or
// "no". Decided once per process, on first use.
bool avx512_enabled();

// An uninitialized CPU tensor for an op's result, as torch.empty, except that
// one of 32 MiB or more is placed on transparent huge pages (see
// swiglu_cpu/huge_pages.cpp).
at::Tensor new_output(c10::IntArrayRef size, at::ScalarType dtype);
}  // namespace cpu
#endif

}  // namespace swiglu
