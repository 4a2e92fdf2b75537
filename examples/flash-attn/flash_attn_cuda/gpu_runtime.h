// The torch-free half of the CUDA/ROCm portability header: the runtime's
// stream and error names and the 16-bit float conversions the kernels use.
// flash_fwd_kernel.cu includes only this half, so hipcc can compile its device
// code for every rocm-arch without a ROCm build of torch; the torch glue
// includes gpu_compat.h, which adds the torch half.
#pragma once

#include <cstdint>

#if defined(ROCM_KERNEL) || defined(USE_ROCM) || defined(__HIP_PLATFORM_AMD__)

#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

namespace gpu {
using stream_t = hipStream_t;
using error_t = hipError_t;
constexpr error_t success = hipSuccess;
inline error_t last_error() { return hipGetLastError(); }
inline const char *error_string(error_t e) { return hipGetErrorString(e); }
}  // namespace gpu

#else

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace gpu {
using stream_t = cudaStream_t;
using error_t = cudaError_t;
constexpr error_t success = cudaSuccess;
inline error_t last_error() { return cudaGetLastError(); }
inline const char *error_string(error_t e) { return cudaGetErrorString(e); }
}  // namespace gpu

#endif

#if defined(__CUDACC__) || defined(__HIPCC__)  // device code only, not the host-compiled glue

namespace gpu {

// Tensors reach the kernels as raw 16-bit patterns (FwdParams holds void
// pointers and a dtype), converted here: bf16 is the top half of an fp32;
// fp16 goes through the toolkit's conversions (torch builds with the
// implicit half conversions switched off).
__device__ __forceinline__ float bf16_bits_to_float(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}
// Round to nearest even; NaN stays NaN.
__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
__device__ __forceinline__ float half_bits_to_float(uint16_t bits) {
  return __half2float(__ushort_as_half(bits));
}
__device__ __forceinline__ uint16_t float_to_half_bits(float f) {
  return __half_as_ushort(__float2half(f));
}

}  // namespace gpu

#endif
