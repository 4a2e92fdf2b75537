// The Metal kernels: one thread per output element of a (d, rows) grid, the
// activation math from swiglu_common/activations.h in fp32.
#include <metal_stdlib>

// Relative paths: the Metal compiler gets no include folders, only the
// shader's own.
#include "../swiglu_common/activations.h"
#include "params.h"

using namespace metal;

// The activations.h math policy in Metal: precise exp (Metal compiles with
// fast math by default).
struct MetalMath {
  typedef float V;
  static float exp_neg(float x) { return precise::exp(x); }
  static float recip(float x) { return 1.0f / x; }
  static float neg_abs(float x) { return -abs(x); }
  static float select_neg(float z, float a, float b) { return z < 0.0f ? a : b; }
  static float fma(float a, float b, float c) { return metal::fma(a, b, c); }
};

template <class A, typename T>
kernel void act_and_mul_forward(device T *out [[buffer(0)]],
                                device const T *in [[buffer(1)]],
                                constant SwigluParams &p [[buffer(2)]],
                                uint2 pos [[thread_position_in_grid]]) {
  if (pos.x >= p.d || pos.y >= p.rows) {
    return;
  }
  const uint gate = pos.y * p.in_stride + pos.x;
  const float g = static_cast<float>(in[gate]);
  const float u = static_cast<float>(in[gate + p.d]);
  out[pos.y * p.out_stride + pos.x] =
      static_cast<T>(swiglu::act_and_mul<MetalMath, A>(g, u));
}

template <class A, typename T>
kernel void act_and_mul_backward(device T *grad_input [[buffer(0)]],
                                 device const T *grad_out [[buffer(1)]],
                                 device const T *in [[buffer(2)]],
                                 constant SwigluParams &p [[buffer(3)]],
                                 uint2 pos [[thread_position_in_grid]]) {
  if (pos.x >= p.d || pos.y >= p.rows) {
    return;
  }
  const uint gate = pos.y * p.in_stride + pos.x;
  const swiglu::GradPair<float> grad = swiglu::act_and_mul_grad<MetalMath, A>(
      static_cast<float>(in[gate]), static_cast<float>(in[gate + p.d]),
      static_cast<float>(grad_out[pos.y * p.grad_out_stride + pos.x]));
  const uint d_gate = pos.y * p.out_stride + pos.x;
  grad_input[d_gate] = static_cast<T>(grad.gate);
  grad_input[d_gate + p.d] = static_cast<T>(grad.up);
}

#define SWIGLU_INSTANTIATE(OP, ACT, T)                                        \
  template [[host_name(OP "_" #T)]] [[kernel]]                                \
  decltype(act_and_mul_forward<swiglu::ACT<MetalMath>, T>)                    \
      act_and_mul_forward<swiglu::ACT<MetalMath>, T>;                         \
  template [[host_name(OP "_backward_" #T)]] [[kernel]]                       \
  decltype(act_and_mul_backward<swiglu::ACT<MetalMath>, T>)                   \
      act_and_mul_backward<swiglu::ACT<MetalMath>, T>;

#define SWIGLU_INSTANTIATE_TYPE(T)                      \
  SWIGLU_INSTANTIATE("silu_and_mul", Silu, T)           \
  SWIGLU_INSTANTIATE("gelu_and_mul", Gelu, T)           \
  SWIGLU_INSTANTIATE("gelu_tanh_and_mul", GeluTanh, T)

SWIGLU_INSTANTIATE_TYPE(float)
SWIGLU_INSTANTIATE_TYPE(half)
#if __METAL_VERSION__ >= 310
SWIGLU_INSTANTIATE_TYPE(bfloat)
#endif
