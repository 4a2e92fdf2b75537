#include <metal_stdlib>
using namespace metal;

kernel void scale_add_float(device float *out [[buffer(0)]], device const float *x [[buffer(1)]],
                            device const float *y [[buffer(2)]], constant float &alpha [[buffer(3)]],
                            uint i [[thread_position_in_grid]]) {
  out[i] = x[i] + alpha * y[i];
}
