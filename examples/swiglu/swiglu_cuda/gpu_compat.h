// The torch half of the CUDA/ROCm portability header (no hipify needed): the
// device guard and current stream under CUDA and HIP names, launch checks, and
// torch's 16-bit types mapped to the toolkit's. The torch glue
// (act_and_mul.cpp) includes it; the kernel file includes only gpu_runtime.h.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include "swiglu_cuda/gpu_runtime.h"

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
inline gpu::stream_t current_stream() {
  return c10::cuda::getCurrentCUDAStream().stream();
}
}  // namespace gpu_compat

#endif

namespace gpu_compat {

// c10::Half/BFloat16 and the toolkit's half/bfloat16 are the same 16 bits, so
// a tensor's data pointer is handed to a launcher as the toolkit's type.
template <typename T>
struct device_type {
  using type = T;
};
template <>
struct device_type<c10::Half> {
  using type = gpu::half;
};
template <>
struct device_type<c10::BFloat16> {
  using type = gpu::bfloat16;
};
static_assert(sizeof(gpu::half) == sizeof(c10::Half), "half layout");
static_assert(sizeof(gpu::bfloat16) == sizeof(c10::BFloat16), "bf16 layout");

template <typename T>
typename device_type<T>::type *device_ptr(T *p) {
  return reinterpret_cast<typename device_type<T>::type *>(p);
}
template <typename T>
const typename device_type<T>::type *device_ptr(const T *p) {
  return reinterpret_cast<const typename device_type<T>::type *>(p);
}

inline void check_launch(gpu::error_t e, const char *what) {
  TORCH_CHECK(e == gpu::success, what, " failed: ", gpu::error_string(e));
}

}  // namespace gpu_compat
