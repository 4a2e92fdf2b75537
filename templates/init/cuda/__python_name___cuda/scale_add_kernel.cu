// scale_add's __global__ kernel and its launcher. This file includes no torch
// header, so kbuild compile-checks its device code for every rocm-arch even
// where only hipcc (no ROCm torch) is installed. Put new kernels here.
#include "scale_add_kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

template <typename T>
__global__ void scale_add_kernel(T *__restrict__ out, const T *__restrict__ x, const T *__restrict__ y,
                                 typename gpu::opmath<T>::type alpha, int64_t n) {
  // bf16/fp16 are computed in float, fp32/fp64 as themselves.
  using op = gpu::opmath<T>;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = op::store(op::load(x[i]) + alpha * op::load(y[i]));
  }
}

}  // namespace

template <typename T>
gpu::error_t scale_add_launch(T *out, const T *x, const T *y, double alpha, int64_t n, gpu::stream_t stream) {
  if (n <= 0) {
    return gpu::success;
  }
  using acc_t = typename gpu::opmath<T>::type;
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < kMaxBlocks ? wanted : kMaxBlocks);
  scale_add_kernel<T><<<blocks, kThreads, 0, stream>>>(out, x, y, static_cast<acc_t>(alpha), n);
  return gpu::last_error();
}

template gpu::error_t scale_add_launch<float>(float *, const float *, const float *, double, int64_t, gpu::stream_t);
template gpu::error_t scale_add_launch<double>(double *, const double *, const double *, double, int64_t,
                                               gpu::stream_t);
template gpu::error_t scale_add_launch<gpu::half>(gpu::half *, const gpu::half *, const gpu::half *, double, int64_t,
                                                  gpu::stream_t);
template gpu::error_t scale_add_launch<gpu::bfloat16>(gpu::bfloat16 *, const gpu::bfloat16 *, const gpu::bfloat16 *,
                                                      double, int64_t, gpu::stream_t);
