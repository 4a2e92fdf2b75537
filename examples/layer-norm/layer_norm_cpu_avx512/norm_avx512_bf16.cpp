// AVX-512 + AVX512_BF16 build of the row kernels in norm_avx512_impl.h: the
// same kernels, with native fp32 -> bf16 rounding (vcvtneps2bf16). Compiled
// with its own unit's flags (build.toml); called only on CPUs with AVX512_BF16.
#define LAYER_NORM_AVX512_NS layer_norm_avx512_bf16
#include "layer_norm_cpu_avx512/norm_avx512_impl.h"
