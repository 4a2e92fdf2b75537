// Declarations of the functions that torch_binding.cpp registers as ops.
// Each build variant compiles exactly one backend: the CPU variant defines
// CPU_KERNEL, the CUDA variant defines CUDA_KERNEL.
#pragma once

#if defined(CPU_KERNEL)
#include "swiglu_cpu/silu_and_mul.h"
#elif defined(CUDA_KERNEL)
#include "swiglu_cuda/silu_and_mul.h"
#endif
