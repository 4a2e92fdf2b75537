#include <torch/library.h>

#include "registration.h"
#include "torch_binding.h"

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  // input: (..., 2 * d), gate half first. out: (..., d), written in place.
  // out = silu(input[..., :d]) * input[..., d:]
  ops.def("silu_and_mul(Tensor! out, Tensor input) -> ()");
#if defined(CPU_KERNEL)
  ops.impl("silu_and_mul", c10::kCPU, &swiglu::cpu::silu_and_mul);
  // Which CPU path silu_and_mul takes in this process (no tensor arguments,
  // so it is registered as a catch-all kernel).
  ops.def("avx512_enabled() -> bool", &swiglu::cpu::avx512_enabled);
#elif defined(CUDA_KERNEL)
  ops.impl("silu_and_mul", c10::kCUDA, &swiglu::cuda::silu_and_mul);
#endif
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
