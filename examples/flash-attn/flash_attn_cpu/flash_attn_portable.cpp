// The CPU kernels (kernel.h) compiled for the baseline ISA: the path for
// CPUs without AVX-512 (and for non-x86 hosts).
#include "flash_attn_cpu/vec_portable.h"
#include "flash_attn_cpu/kernel.h"

namespace flash_attn {
namespace cpu {
namespace portable {

using K = Entry<VecPortable, F32Tiles>;
extern const Kernels kernels = {"portable", &K::fwd_workspace, &K::fwd, &K::bwd_workspace, &K::bwd};

}  // namespace portable
}  // namespace cpu
}  // namespace flash_attn
