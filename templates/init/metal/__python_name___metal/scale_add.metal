// scale_add on Apple GPUs: out = x + alpha * y, one thread per element.
#include <metal_stdlib>

using namespace metal;

struct ScaleAddParams {
  float alpha;
  uint n;
};

template <typename T>
kernel void scale_add_kernel(device T *out [[buffer(0)]], device const T *x [[buffer(1)]],
                             device const T *y [[buffer(2)]], constant ScaleAddParams &params [[buffer(3)]],
                             uint i [[thread_position_in_grid]]) {
  if (i >= params.n) {
    return;
  }
  // Half precision is computed in float.
  out[i] = static_cast<T>(static_cast<float>(x[i]) + params.alpha * static_cast<float>(y[i]));
}

#define INSTANTIATE_SCALE_ADD(NAME, T) \
  template [[host_name(NAME)]] [[kernel]] decltype(scale_add_kernel<T>) scale_add_kernel<T>;

INSTANTIATE_SCALE_ADD("scale_add_float", float)
INSTANTIATE_SCALE_ADD("scale_add_half", half)
#if __METAL_VERSION__ >= 310
INSTANTIATE_SCALE_ADD("scale_add_bfloat", bfloat)
#endif
