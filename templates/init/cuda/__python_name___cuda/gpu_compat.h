// The few lines that let scale_add.cu compile with both nvcc (CUDA_KERNEL) and
// hipcc (ROCM_KERNEL) without running hipify. Kernel code itself (__global__,
// blockIdx, threadIdx, <<<...>>>) is the same in CUDA and HIP.
#pragma once

#if defined(ROCM_KERNEL) || defined(USE_ROCM) || defined(__HIP_PLATFORM_AMD__)

#include <hip/hip_runtime.h>

#include <ATen/hip/impl/HIPGuardImplMasqueradingAsCUDA.h>
#include <ATen/hip/impl/HIPStreamMasqueradingAsCUDA.h>

namespace gpu_compat {
using stream_t = hipStream_t;
using error_t = hipError_t;
using OptionalDeviceGuard = at::hip::OptionalHIPGuardMasqueradingAsCUDA;
inline stream_t current_stream() {
  return at::hip::getCurrentHIPStreamMasqueradingAsCUDA().stream();
}
inline error_t last_error() { return hipGetLastError(); }
inline bool ok(error_t e) { return e == hipSuccess; }
inline const char *error_string(error_t e) { return hipGetErrorString(e); }
}  // namespace gpu_compat

#else

#include <cuda_runtime.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace gpu_compat {
using stream_t = cudaStream_t;
using error_t = cudaError_t;
using OptionalDeviceGuard = c10::cuda::OptionalCUDAGuard;
inline stream_t current_stream() {
  return c10::cuda::getCurrentCUDAStream().stream();
}
inline error_t last_error() { return cudaGetLastError(); }
inline bool ok(error_t e) { return e == cudaSuccess; }
inline const char *error_string(error_t e) { return cudaGetErrorString(e); }
}  // namespace gpu_compat

#endif

#define GPU_COMPAT_CHECK_LAUNCH(what)                                     \
  do {                                                                    \
    const gpu_compat::error_t _err = gpu_compat::last_error();            \
    TORCH_CHECK(gpu_compat::ok(_err), what, " failed: ",                  \
                gpu_compat::error_string(_err));                          \
  } while (0)
