// The CPU kernels' entry points, one set per instruction set. Torch-free (and
// free of standard library code), so the AVX-512 units can include it: the
// glue (flash_attn_cpu.cpp) picks a set at run time by CPUID and hands it a
// Runtime (torch's thread pool) and a workspace it allocated.
#pragma once

#include <cstdint>

#include "flash_attn_common/params.h"

namespace flash_attn {
namespace cpu {

struct Runtime {
  int num_threads = 1;
  // Runs body(ctx, begin, end) over chunks of [0, n) on torch's intra-op
  // threads (at::parallel_for with grain 1).
  void (*parallel_for)(int64_t n, void *ctx, void (*body)(void *, int64_t, int64_t)) = nullptr;
};

struct Kernels {
  const char *name;
  // Bytes of 64-byte aligned workspace the call needs (packed K/V blocks,
  // per-thread tiles); then the call itself.
  int64_t (*fwd_workspace)(const FwdParams &, int num_threads);
  void (*fwd)(const FwdParams &, const Runtime &, void *workspace);
  int64_t (*bwd_workspace)(const BwdParams &, int num_threads);
  void (*bwd)(const BwdParams &, const Runtime &, void *workspace);
};

// Baseline ISA (flash_attn_cpu/), always available.
namespace portable {
extern const Kernels kernels;
}
#if defined(__x86_64__) || defined(_M_X64)
#define FLASH_ATTN_HAVE_AVX512_UNITS 1
// AVX-512 F/BW/VL/DQ + FMA (flash_attn_cpu_avx512/): fp32 FMA tiles.
namespace avx512 {
extern const Kernels kernels;
}
// Plus AVX512_BF16 (flash_attn_cpu_avx512_bf16/): the bf16 forward multiplies
// bf16 pairs with vdpbf16ps (fp32 accumulation); fp32 inputs and the
// backward run the AVX-512 fp32 tiles.
namespace avx512_bf16 {
extern const Kernels kernels;
}
#endif

}  // namespace cpu
}  // namespace flash_attn
