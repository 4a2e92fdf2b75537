// The torch-free half of the CUDA/ROCm portability header: runtime, stream
// and error names, the 16-bit float types and their conversions, the warp
// size and warp shuffles. Kernel files (.cu) include only this half, so hipcc
// can compile their device code for every rocm-arch even where no ROCm build
// of torch is installed; the torch glue includes gpu_compat.h, which adds the
// torch half. (The same split as examples/relu.)
#pragma once

#include <cstdint>

#if defined(ROCM_KERNEL) || defined(USE_ROCM) || defined(__HIP_PLATFORM_AMD__)

#define LAYER_NORM_HIP 1
#include <hip/hip_bfloat16.h>
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

// The wavefront size of the target being compiled: 64 on CDNA (gfx90a,
// gfx942), 32 on RDNA (wave32). Host code never uses it (the host pass sees
// the fallback).
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define GPU_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#else
#define GPU_WARP_SIZE 64
#endif
// Host side: launch sizes are multiples of this, which is a whole number of
// warps for either wavefront size.
#define GPU_THREAD_GRANULARITY 64

namespace gpu {
using stream_t = hipStream_t;
using error_t = hipError_t;
constexpr error_t success = hipSuccess;
constexpr error_t invalid_value = hipErrorInvalidValue;
inline error_t last_error() { return hipGetLastError(); }
inline const char *error_string(error_t e) { return hipGetErrorString(e); }

// Number of compute units of the current device (0 if it cannot be queried).
inline int multiprocessor_count() {
  int device = 0;
  int count = 0;
  if (hipGetDevice(&device) != hipSuccess ||
      hipDeviceGetAttribute(&count, hipDeviceAttributeMultiprocessorCount, device) != hipSuccess) {
    return 0;
  }
  return count;
}

using half = __half;
using bfloat16 = hip_bfloat16;
__device__ inline float to_float(half v) { return __half2float(v); }
__device__ inline float to_float(bfloat16 v) { return static_cast<float>(v); }
__device__ inline half to_half(float v) { return __float2half(v); }
// Round to nearest even (hip_bfloat16's float constructor does).
__device__ inline bfloat16 to_bfloat16(float v) { return bfloat16(v); }

#if defined(__HIPCC__)
// Butterfly exchange within a warp (all lanes active).
__device__ inline float shfl_xor(float v, int mask) { return __shfl_xor(v, mask); }
#endif
}  // namespace gpu

#else

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define GPU_WARP_SIZE 32
#define GPU_THREAD_GRANULARITY 32

namespace gpu {
using stream_t = cudaStream_t;
using error_t = cudaError_t;
constexpr error_t success = cudaSuccess;
constexpr error_t invalid_value = cudaErrorInvalidValue;
inline error_t last_error() { return cudaGetLastError(); }
inline const char *error_string(error_t e) { return cudaGetErrorString(e); }

inline int multiprocessor_count() {
  int device = 0;
  int count = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return 0;
  }
  return count;
}

using half = __half;
using bfloat16 = __nv_bfloat16;
__device__ inline float to_float(half v) { return __half2float(v); }
__device__ inline float to_float(bfloat16 v) { return __bfloat162float(v); }
__device__ inline half to_half(float v) { return __float2half_rn(v); }
__device__ inline bfloat16 to_bfloat16(float v) { return __float2bfloat16_rn(v); }

#if defined(__CUDACC__)
__device__ inline float shfl_xor(float v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}
#endif
}  // namespace gpu

#endif

namespace gpu {

// What a kernel computes in: float for every supported element type; load
// widens, store rounds to nearest even.
template <typename T>
struct opmath;
template <>
struct opmath<float> {
  __device__ static float load(float v) { return v; }
  __device__ static float store(float v) { return v; }
};
template <>
struct opmath<half> {
  __device__ static float load(half v) { return to_float(v); }
  __device__ static half store(float v) { return to_half(v); }
};
template <>
struct opmath<bfloat16> {
  __device__ static float load(bfloat16 v) { return to_float(v); }
  __device__ static bfloat16 store(float v) { return to_bfloat16(v); }
};

// N values of T moved as one aligned access (16 bytes when N * sizeof(T) == 16).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// The reductions below exist only for device compilers (the torch glue, a
// .cpp built by the host compiler, includes this header too).
#if defined(__CUDACC__) || defined(__HIPCC__)

// Sum over the warp; every lane gets the result.
__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int offset = GPU_WARP_SIZE / 2; offset > 0; offset >>= 1) {
    v += shfl_xor(v, offset);
  }
  return v;
}

// Largest number of warps in a block of up to 1024 threads, for any warp size.
constexpr int kMaxWarps = 1024 / 32;

// Sum over the block; every thread gets the result. blockDim.x must be a
// multiple of the warp size (the launchers round up to
// GPU_THREAD_GRANULARITY). `red` is a __shared__ array of kMaxWarps floats.
__device__ inline float block_sum(float v, float *red) {
  const int lane = threadIdx.x % GPU_WARP_SIZE;
  const int warp = threadIdx.x / GPU_WARP_SIZE;
  const int warps = blockDim.x / GPU_WARP_SIZE;
  v = warp_sum(v);
  if (lane == 0) {
    red[warp] = v;
  }
  __syncthreads();
  // Every warp reduces the per-warp partials itself (warps <= warp size), so
  // all threads end with the total without another round through memory.
  v = lane < warps ? red[lane] : 0.0f;
  v = warp_sum(v);
  __syncthreads();  // `red` may be reused right after
  return v;
}

#endif  // device compilers

}  // namespace gpu
