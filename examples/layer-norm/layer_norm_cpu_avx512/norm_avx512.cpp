// AVX-512 (F/BW/VL + FMA) build of the row kernels in norm_avx512_impl.h.
// Only this file, of the default units, gets the AVX-512 flags (build.toml).
#define LAYER_NORM_AVX512_NS layer_norm_avx512
#include "layer_norm_cpu_avx512/norm_avx512_impl.h"
