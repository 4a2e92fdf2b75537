// The torch half of the CUDA/ROCm portability header: the device guard and
// the current stream under CUDA and HIP names, and launch checks. The torch
// glue (flash_attn_cuda.cpp) includes it; kernel files include only
// gpu_runtime.h.
#pragma once

#include <c10/util/Exception.h>

#include "flash_attn_cuda/gpu_runtime.h"

#if defined(ROCM_KERNEL) || defined(USE_ROCM) || defined(__HIP_PLATFORM_AMD__)

#include <ATen/hip/impl/HIPGuardImplMasqueradingAsCUDA.h>
#include <ATen/hip/impl/HIPStreamMasqueradingAsCUDA.h>

namespace gpu_compat {
using OptionalDeviceGuard = at::hip::OptionalHIPGuardMasqueradingAsCUDA;
inline gpu::stream_t current_stream() {
  return at::hip::getCurrentHIPStreamMasqueradingAsCUDA().stream();
}
}  // namespace gpu_compat

#else

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace gpu_compat {
using OptionalDeviceGuard = c10::cuda::OptionalCUDAGuard;
inline gpu::stream_t current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }
}  // namespace gpu_compat

#endif

namespace gpu_compat {
inline void check_launch(gpu::error_t e, const char *what) {
  TORCH_CHECK(e == gpu::success, what, " failed: ", gpu::error_string(e));
}
}  // namespace gpu_compat
