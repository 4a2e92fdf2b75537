// The CPU kernels (flash_attn_cpu/kernel.h) compiled for AVX-512 F/BW/VL/DQ
// and FMA (this unit's cxx-flags): fp32 register tiles of 6 x 64 in zmm
// registers. The glue only calls them after a CPUID check.
#include "flash_attn_cpu_avx512/vec_avx512.h"
#include "flash_attn_cpu/kernel.h"

namespace flash_attn {
namespace cpu {
namespace avx512 {

using K = Entry<VecAvx512, F32Tiles>;
extern const Kernels kernels = {"avx512", &K::fwd_workspace, &K::fwd, &K::bwd_workspace, &K::bwd};

}  // namespace avx512
}  // namespace cpu
}  // namespace flash_attn
