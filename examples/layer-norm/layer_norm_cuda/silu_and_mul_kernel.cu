// silu_and_mul for CUDA and ROCm (HIP): out = silu(gate) * up, one pass.
// Torch-free (see norm_kernels.cu). The numerics follow the CPU kernels:
// sigmoid from e = exp(-|g|), so no intermediate overflows for large |g|.
//
// One block row per input row (blockIdx.x, grid-stride), several blocks along
// a long row when there are few rows (blockIdx.y); 16-byte packs when d, both
// row strides and both base pointers allow it, else one element per thread.

#include "kernels.h"

namespace layer_norm_gpu {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float silu_mul(float g, float u) {
  const float e = expf(-fabsf(g));
  const float inv = 1.0f / (1.0f + e);
  const float sigmoid = g < 0.0f ? e * inv : inv;
  return g * sigmoid * u;
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads)
    silu_and_mul_kernel(T *__restrict__ out, const T *__restrict__ in, int64_t rows, int64_t d,
                        int64_t out_stride, int64_t in_stride) {
  using P = gpu::Pack<T, VEC>;
  using op = gpu::opmath<T>;
  const int64_t n = d / VEC;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.y;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const P *gate = reinterpret_cast<const P *>(in + row * in_stride);
    const P *up = reinterpret_cast<const P *>(in + row * in_stride + d);
    P *o = reinterpret_cast<P *>(out + row * out_stride);
    for (int64_t i = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; i < n;
         i += step) {
      const P g = gate[i];
      const P u = up[i];
      P r;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        r.v[k] = op::store(silu_mul(op::load(g.v[k]), op::load(u.v[k])));
      }
      o[i] = r;
    }
  }
}

template <typename T, int VEC>
void launch(T *out, const T *in, int64_t rows, int64_t d, int64_t out_stride, int64_t in_stride,
            gpu::stream_t stream) {
  const int64_t n = d / VEC;
  int64_t threads = (n + GPU_THREAD_GRANULARITY - 1) / GPU_THREAD_GRANULARITY * GPU_THREAD_GRANULARITY;
  threads = threads < kThreads ? threads : kThreads;
  // Few rows: spread each row over more blocks so that the device fills up.
  int64_t blocks_per_row = 1;
  if (rows < 1024) {
    const int64_t wanted = 1024 / rows;
    const int64_t useful = (n + threads - 1) / threads;
    blocks_per_row = wanted < useful ? wanted : useful;
    blocks_per_row = blocks_per_row < 1 ? 1 : (blocks_per_row > 65535 ? 65535 : blocks_per_row);
  }
  const int64_t grid_rows = rows < (int64_t{1} << 30) ? rows : (int64_t{1} << 30);
  const dim3 grid(static_cast<unsigned>(grid_rows), static_cast<unsigned>(blocks_per_row));
  silu_and_mul_kernel<T, VEC><<<grid, static_cast<unsigned>(threads), 0, stream>>>(
      out, in, rows, d, out_stride, in_stride);
}

}  // namespace

template <typename T>
gpu::error_t silu_and_mul_launch(T *out, const T *in, int64_t rows, int64_t d, int64_t out_stride,
                                 int64_t in_stride, gpu::stream_t stream) {
  if (rows <= 0 || d <= 0) {
    return gpu::success;
  }
  constexpr int VEC = 16 / sizeof(T);
  const bool vec = reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(in) % 16 == 0 && d % VEC == 0 &&
                   out_stride % VEC == 0 && in_stride % VEC == 0;
  if (vec) {
    launch<T, VEC>(out, in, rows, d, out_stride, in_stride, stream);
  } else {
    launch<T, 1>(out, in, rows, d, out_stride, in_stride, stream);
  }
  return gpu::last_error();
}

template gpu::error_t silu_and_mul_launch<float>(float *, const float *, int64_t, int64_t,
                                                 int64_t, int64_t, gpu::stream_t);
template gpu::error_t silu_and_mul_launch<gpu::half>(gpu::half *, const gpu::half *, int64_t,
                                                     int64_t, int64_t, int64_t, gpu::stream_t);
template gpu::error_t silu_and_mul_launch<gpu::bfloat16>(gpu::bfloat16 *, const gpu::bfloat16 *,
                                                         int64_t, int64_t, int64_t, int64_t,
                                                         gpu::stream_t);

}  // namespace layer_norm_gpu
