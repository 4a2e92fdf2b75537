#include <torch/library.h>

#include "registration.h"
#include "torch_binding.h"

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("scale_add(Tensor! out, Tensor x, Tensor y, float alpha) -> ()");
#if defined(CPU_KERNEL)
  ops.impl("scale_add", torch::kCPU, &scale_add);
#elif defined(CUDA_KERNEL) || defined(ROCM_KERNEL)
  ops.impl("scale_add", torch::kCUDA, &scale_add);
#elif defined(METAL_KERNEL)
  ops.impl("scale_add", torch::kMPS, &scale_add);
#elif defined(XPU_KERNEL)
  ops.impl("scale_add", torch::kXPU, &scale_add);
#endif
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
