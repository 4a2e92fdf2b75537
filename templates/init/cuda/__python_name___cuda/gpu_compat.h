// One source for CUDA and ROCm: the few runtime names that differ, mapped once.
#pragma once
#if defined(USE_ROCM) || defined(__HIP_PLATFORM_AMD__)
#include <hip/hip_runtime.h>
#define GPU_LAUNCH_CHECK() C10_HIP_KERNEL_LAUNCH_CHECK()
#else
#include <cuda_runtime.h>
#define GPU_LAUNCH_CHECK() C10_CUDA_KERNEL_LAUNCH_CHECK()
#endif
