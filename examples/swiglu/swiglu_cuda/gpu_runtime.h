// The torch-free half of the CUDA/ROCm portability header (as in
// examples/relu, which kbuild init scaffolds): the runtime's stream and error
// names, the 16-bit float types and their conversions. The kernel file
// (act_and_mul_kernel.cu) includes only this half, so hipcc can compile its
// device code for every rocm-arch even where no ROCm build of torch is
// installed; the torch glue (act_and_mul.cpp) includes gpu_compat.h, which
// adds the torch half.
#pragma once

#if defined(ROCM_KERNEL) || defined(USE_ROCM) || defined(__HIP_PLATFORM_AMD__)

#include <hip/hip_bfloat16.h>
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

namespace gpu {
using stream_t = hipStream_t;
using error_t = hipError_t;
constexpr error_t success = hipSuccess;
inline error_t last_error() { return hipGetLastError(); }
inline const char *error_string(error_t e) { return hipGetErrorString(e); }

using half = __half;
using bfloat16 = hip_bfloat16;
__device__ inline float to_float(half v) { return __half2float(v); }
__device__ inline float to_float(bfloat16 v) { return static_cast<float>(v); }
__device__ inline half to_half(float v) { return __float2half(v); }
__device__ inline bfloat16 to_bfloat16(float v) { return bfloat16(v); }
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

using half = __half;
using bfloat16 = __nv_bfloat16;
__device__ inline float to_float(half v) { return __half2float(v); }
__device__ inline float to_float(bfloat16 v) { return __bfloat162float(v); }
__device__ inline half to_half(float v) { return __float2half(v); }
__device__ inline bfloat16 to_bfloat16(float v) { return __float2bfloat16(v); }
}  // namespace gpu

#endif

namespace gpu {

// What a kernel computes in, as at::opmath_type: float for the 16-bit types
// (torch builds with their implicit conversions switched off), else the type.
template <typename T>
struct opmath {
  using type = T;
  __device__ static T load(T v) { return v; }
  __device__ static T store(T v) { return v; }
};
template <>
struct opmath<half> {
  using type = float;
  __device__ static float load(half v) { return to_float(v); }
  __device__ static half store(float v) { return to_half(v); }
};
template <>
struct opmath<bfloat16> {
  using type = float;
  __device__ static float load(bfloat16 v) { return to_float(v); }
  __device__ static bfloat16 store(float v) { return to_bfloat16(v); }
};

}  // namespace gpu
