#include <torch/library.h>

#include "registration.h"
#include "torch_binding.h"

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  // Outputs come first and are written in place; see torch_binding.h for what
  // each op computes. Optional outputs (residual_out, grad_weight, grad_bias)
  // are skipped when None.
  ops.def(
      "layer_norm_fwd(Tensor(a!) out, Tensor(b!)? residual_out, Tensor(c!) mean, "
      "Tensor(d!) rstd, Tensor input, Tensor? residual, Tensor? weight, "
      "Tensor? bias, float eps) -> ()");
  ops.def(
      "rms_norm_fwd(Tensor(a!) out, Tensor(b!)? residual_out, Tensor(c!) rstd, "
      "Tensor input, Tensor? residual, Tensor? weight, float eps) -> ()");
  ops.def(
      "layer_norm_bwd(Tensor(a!) grad_input, Tensor(b!)? grad_weight, "
      "Tensor(c!)? grad_bias, Tensor grad_out, Tensor? grad_residual_out, "
      "Tensor input, Tensor mean, Tensor rstd, Tensor? weight) -> ()");
  ops.def(
      "rms_norm_bwd(Tensor(a!) grad_input, Tensor(b!)? grad_weight, "
      "Tensor grad_out, Tensor? grad_residual_out, Tensor input, Tensor rstd, "
      "Tensor? weight) -> ()");
  ops.def("silu_and_mul(Tensor(a!) out, Tensor input) -> ()");

#if defined(CPU_KERNEL)
  const auto key = c10::DispatchKey::CPU;
#elif defined(CUDA_KERNEL) || defined(ROCM_KERNEL)
  // ROCm builds of torch register HIP devices under the CUDA key.
  const auto key = c10::DispatchKey::CUDA;
#elif defined(METAL_KERNEL)
  const auto key = c10::DispatchKey::MPS;
#elif defined(XPU_KERNEL)
  const auto key = c10::DispatchKey::XPU;
#endif
  ops.impl("layer_norm_fwd", key, &layer_norm_ops::layer_norm_fwd);
  ops.impl("rms_norm_fwd", key, &layer_norm_ops::rms_norm_fwd);
  ops.impl("layer_norm_bwd", key, &layer_norm_ops::layer_norm_bwd);
  ops.impl("rms_norm_bwd", key, &layer_norm_ops::rms_norm_bwd);
  ops.impl("silu_and_mul", key, &layer_norm_ops::silu_and_mul);

#if defined(CPU_KERNEL)
  // Which CPU path the forward ops take in this process (no tensor arguments,
  // so it is registered as a catch-all kernel).
  ops.def("avx512_enabled() -> bool", &layer_norm_ops::avx512_enabled);
  ops.def("avx512_bf16_enabled() -> bool", &layer_norm_ops::avx512_bf16_enabled);
  ops.def("new_output(int[] size, ScalarType dtype) -> Tensor", &layer_norm_ops::new_output);
#endif
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
