// The functions torch_binding.cpp registers as ops. Every backend source
// (layer_norm_cpu/, layer_norm_cuda/ for CUDA and ROCm, layer_norm_metal/,
// layer_norm_xpu/) defines all of them; a variant compiles exactly one backend.
//
// Conventions shared by all ops (the Python package allocates the outputs):
// - Rows are the last dimension: `input` of shape (..., n) is rows x n.
// - fp32, bf16 and fp16 on every backend (fp64 too on CPU); 16-bit values are
//   computed in fp32 and rounded once per stored value.
// - `weight`/`bias`, when given, have n elements and the input's dtype.
// - `mean`/`rstd` hold one value per row, float32 (float64 for fp64 input).
// - Inputs of any layout are accepted (copied when their rows are not evenly
//   strided with a contiguous last dimension); outputs must be contiguous in
//   the last dimension with evenly strided rows, else the op refuses them.
#pragma once

// Only the Tensor class: <torch/all.h> would add about 15 s of parsing to every
// translation unit that includes this header.
#include <ATen/core/Tensor.h>

#include <optional>

namespace layer_norm_ops {

// y = (s - mean(s)) * rstd * weight + bias with s = input (+ residual).
// With `residual`, s is rounded to the input's dtype and written to
// `residual_out` (the prenorm pattern's next residual), and the statistics are
// those of that rounded s.
void layer_norm_fwd(at::Tensor& out, const std::optional<at::Tensor>& residual_out,
                    at::Tensor& mean, at::Tensor& rstd, const at::Tensor& input,
                    const std::optional<at::Tensor>& residual,
                    const std::optional<at::Tensor>& weight,
                    const std::optional<at::Tensor>& bias, double eps);

// y = weight * to_dtype(s * rstd), rstd = 1 / sqrt(mean(s^2) + eps), exactly the
// LlamaRMSNorm expression (the normalized value is rounded to the input dtype
// before the weight multiply). Residual as in layer_norm_fwd.
void rms_norm_fwd(at::Tensor& out, const std::optional<at::Tensor>& residual_out,
                  at::Tensor& rstd, const at::Tensor& input,
                  const std::optional<at::Tensor>& residual,
                  const std::optional<at::Tensor>& weight, double eps);

// Gradients of layer_norm_fwd. `input` is the s the forward normalized (the
// residual_out when a residual was fused), `mean`/`rstd` what it saved.
// grad_input = d loss / d s, plus `grad_residual_out` when given (the gradient
// that reached residual_out). grad_weight/grad_bias: reduced over all rows.
void layer_norm_bwd(at::Tensor& grad_input,
                    const std::optional<at::Tensor>& grad_weight,
                    const std::optional<at::Tensor>& grad_bias,
                    const at::Tensor& grad_out,
                    const std::optional<at::Tensor>& grad_residual_out,
                    const at::Tensor& input, const at::Tensor& mean,
                    const at::Tensor& rstd,
                    const std::optional<at::Tensor>& weight);

// Gradients of rms_norm_fwd (the rounding before the weight multiply is
// treated as the identity).
void rms_norm_bwd(at::Tensor& grad_input,
                  const std::optional<at::Tensor>& grad_weight,
                  const at::Tensor& grad_out,
                  const std::optional<at::Tensor>& grad_residual_out,
                  const at::Tensor& input, const at::Tensor& rstd,
                  const std::optional<at::Tensor>& weight);

// out[..., j] = silu(input[..., j]) * input[..., d + j], input (..., 2d).
void silu_and_mul(at::Tensor& out, const at::Tensor& input);

#if defined(CPU_KERNEL)
// True when the CPU forward ops use the AVX-512 unit: the CPU has AVX512F/BW/VL
// and FMA, and LAYER_NORM_DISABLE_AVX512 is unset, empty, "0", "false", "off"
// or "no". Decided once per process, on first use.
bool avx512_enabled();
// True when, in addition, bf16 values are rounded with AVX512_BF16's
// vcvtneps2bf16 (the CPU has it and LAYER_NORM_DISABLE_AVX512_BF16 is not
// set). That instruction flushes bf16 results below 2^-126 to zero.
bool avx512_bf16_enabled();
// An uninitialized CPU tensor for an op's result: blocks of 32 MiB and more on
// transparent huge pages, kept for reuse once freed (layer_norm_cpu/huge_pages.cpp).
at::Tensor new_output(c10::IntArrayRef size, at::ScalarType dtype);
#endif

}  // namespace layer_norm_ops
