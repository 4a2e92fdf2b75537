// relu's __global__ kernel and its launcher. This file includes no torch
// header, so kbuild compile-checks its device code for every rocm-arch even
// where only hipcc (no ROCm torch) is installed.
#include "relu_kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

template <typename T>
__global__ void relu_kernel(T *__restrict__ out, const T *__restrict__ in,
                            int64_t n) {
  // Half and bfloat16 are compared in float, float and double as themselves.
  using op = gpu::opmath<T>;
  using acc_t = typename op::type;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    const acc_t v = op::load(in[i]);
    // `v < 0` is false for NaN, so NaN propagates as in torch.relu.
    out[i] = op::store(v < acc_t(0) ? acc_t(0) : v);
  }
}

}  // namespace

template <typename T>
gpu::error_t relu_launch(T *out, const T *in, int64_t n,
                         gpu::stream_t stream) {
  if (n <= 0) {
    return gpu::success;
  }
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < kMaxBlocks ? wanted : kMaxBlocks);
  relu_kernel<T><<<blocks, kThreads, 0, stream>>>(out, in, n);
  return gpu::last_error();
}

template gpu::error_t relu_launch<float>(float *, const float *, int64_t,
                                         gpu::stream_t);
template gpu::error_t relu_launch<double>(double *, const double *, int64_t,
                                          gpu::stream_t);
template gpu::error_t relu_launch<gpu::half>(gpu::half *, const gpu::half *,
                                             int64_t, gpu::stream_t);
template gpu::error_t relu_launch<gpu::bfloat16>(gpu::bfloat16 *,
                                                 const gpu::bfloat16 *, int64_t,
                                                 gpu::stream_t);
