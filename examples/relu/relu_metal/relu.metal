#include <metal_stdlib>

#include "common.h"

using namespace metal;

template <typename T>
kernel void relu_kernel(device const T *input [[buffer(0)]],
                        device T *output [[buffer(1)]],
                        constant ReluParams &params [[buffer(2)]],
                        uint index [[thread_position_in_grid]]) {
  if (index >= params.n) {
    return;
  }
  const T v = input[index];
  // `v < 0` is false for NaN, so NaN propagates as in torch.relu.
  output[index] = v < T(0) ? T(0) : v;
}

#define INSTANTIATE_RELU(NAME, T) \
  template [[host_name(NAME)]] [[kernel]] decltype(relu_kernel<T>) relu_kernel<T>;

INSTANTIATE_RELU(RELU_KERNEL_FLOAT, float)
INSTANTIATE_RELU(RELU_KERNEL_HALF, half)
#if __METAL_VERSION__ >= 310
INSTANTIATE_RELU(RELU_KERNEL_BFLOAT, bfloat)
#endif
