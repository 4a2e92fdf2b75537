// The activation math of every backend, written once.
//
// act_and_mul(g, u) = act(g) * u and its gradient, for the three activations
// of the ops (SiLU, exact GELU, tanh GELU). Every backend instantiates these
// templates with its own "math policy" M, a struct of static functions over
// its value type M::V:
//
//   V exp_neg(V x)           exp(x) for x <= 0; exp(-inf) = 0
//   V recip(V x)             1 / x for x in [1, inf]
//   V neg_abs(V x)           -|x|
//   V select_neg(V z, V a, V b)   z < 0 ? a : b
//   V fma(V a, V b, V c)     a * b + c
//
// plus +, -, * on V and V(float). M::V is float on the GPUs and in the
// portable CPU path (where a fixed-length loop over lanes auto-vectorizes),
// and a 16-lane AVX-512 register in the AVX-512 CPU unit.
//
// The file includes nothing and uses no standard library, so that the
// AVX-512 unit (which must not include headers whose inline functions could
// be emitted with AVX-512 instructions) and Metal Shading Language (which has
// no C++ standard library, no lambdas and no inheritance) can include it. Its
// templates are only instantiated with policies from anonymous namespaces, so
// every instantiation has internal linkage: an AVX-512 copy can never be
// picked by the linker for the portable unit.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define SWIGLU_MATH_FN __device__ inline __attribute__((always_inline))
#elif defined(__METAL_VERSION__)
#define SWIGLU_MATH_FN inline
#else
#define SWIGLU_MATH_FN inline __attribute__((always_inline))
#endif

namespace swiglu {

// The activation of an op; the value is part of the host-device contract of
// the launchers (and of the Metal kernel names, see swiglu_metal/).
enum class Activation : int {
  kSilu = 0,      // silu(g) = g * sigmoid(g)
  kGelu = 1,      // gelu(g) = g * Phi(g), Phi the standard normal CDF (erf)
  kGeluTanh = 2,  // g * 0.5 * (1 + tanh(sqrt(2/pi) * (g + 0.044715 g^3)))
};

// Each activation is act(g) = g * p(g). The gate gives p and its derivative
// dp, from which forward and backward follow for all three alike:
//   out  = act(g) * u
//   d/dg = dout * u * (p + g * dp)
//   d/du = dout * act(g)
template <class V>
struct Gate {
  V p;
  V dp;
};

template <class V>
struct GradPair {
  V gate;  // d(loss)/d(g)
  V up;    // d(loss)/d(u)
};

// sigmoid(z) and its derivative sigmoid(z) * sigmoid(-z), from e = exp(-|z|)
// in (0, 1]: the denominator 1 + e stays in [1, 2], so nothing overflows for
// any z, and neither value is formed as a difference (no cancellation).
template <class M>
SWIGLU_MATH_FN Gate<typename M::V> sigmoid(typename M::V z) {
  using V = typename M::V;
  const V e = M::exp_neg(M::neg_abs(z));
  const V inv = M::recip(V(1.0f) + e);  // sigmoid(|z|)
  Gate<V> r;
  r.p = M::select_neg(z, e * inv, inv);
  r.dp = e * inv * inv;
  return r;
}

template <class M>
struct Silu {
  using V = typename M::V;
  static SWIGLU_MATH_FN Gate<V> gate(V g) { return sigmoid<M>(g); }
};

// 0.5 * (1 + tanh(y)) = sigmoid(2 y), so the tanh GELU is g * sigmoid(z) with
// z = 2 sqrt(2/pi) (g + 0.044715 g^3) = g * (kA + kB g^2).
template <class M>
struct GeluTanh {
  using V = typename M::V;
  static SWIGLU_MATH_FN Gate<V> gate(V g) {
    const float kA = 1.5957691216057308f;   // 2 * sqrt(2 / pi)
    const float kB = 0.07135481627260025f;  // kA * 0.044715
    const V g2 = g * g;
    const Gate<V> s = sigmoid<M>(g * M::fma(V(kB), g2, V(kA)));
    Gate<V> r;
    r.p = s.p;
    r.dp = s.dp * M::fma(V(3.0f * kB), g2, V(kA));  // sigmoid'(z) * dz/dg
    return r;
  }
};

// Phi(g) = 0.5 * erfc(-g / sqrt(2)). erfc(x) for x = |g| / sqrt(2) >= 0 by
// Abramowitz & Stegun 7.1.26 (absolute error <= 1.5e-7; the same formula as
// PyTorch's vectorized CPU erf): erfc(x) = t * poly(t) * exp(-x^2), with
// t = 1 / (1 + 0.3275911 x). Phi(-|g|) = erfc(x) / 2 directly and Phi(|g|) =
// 1 - erfc(x) / 2, so Phi of a negative g is not formed as 1 + erf (which
// cancels). exp(-x^2) = exp(-g^2 / 2) also gives the density phi(g) = dp.
template <class M>
struct Gelu {
  using V = typename M::V;
  static SWIGLU_MATH_FN Gate<V> gate(V g) {
    const V e = M::exp_neg(V(-0.5f) * g * g);
    // 1 + p x with x = |g| / sqrt(2), written with -|g|.
    const V t = M::recip(M::fma(V(-0.3275911f * 0.70710678118654752f), M::neg_abs(g), V(1.0f)));
    V poly = M::fma(V(1.061405429f), t, V(-1.453152027f));
    poly = M::fma(poly, t, V(1.421413741f));
    poly = M::fma(poly, t, V(-0.284496736f));
    poly = M::fma(poly, t, V(0.254829592f));
    const V half_erfc = V(0.5f) * (poly * t) * e;  // Phi(-|g|)
    Gate<V> r;
    r.p = M::select_neg(g, half_erfc, V(1.0f) - half_erfc);
    r.dp = e * V(0.3989422804014327f);  // 1 / sqrt(2 pi)
    return r;
  }
};

// act(g) * u. The activation is formed before the product with u, so a large
// |g * u| cannot overflow where the result is finite.
template <class M, class A>
SWIGLU_MATH_FN typename M::V act_and_mul(typename M::V g, typename M::V u) {
  return (g * A::gate(g).p) * u;
}

template <class M, class A>
SWIGLU_MATH_FN GradPair<typename M::V> act_and_mul_grad(typename M::V g, typename M::V u,
                                                         typename M::V dout) {
  using V = typename M::V;
  const Gate<V> k = A::gate(g);
  GradPair<V> r;
  r.gate = dout * u * M::fma(g, k.dp, k.p);
  r.up = dout * (g * k.p);
  return r;
}

#if !defined(__METAL_VERSION__)
// Calls f(A{}) with A = Silu<M>, Gelu<M> or GeluTanh<M>: turns the run-time
// activation into the template argument of a row kernel, on the host (the
// CUDA launchers too). Metal picks its kernels by name instead.
template <class M, class F>
inline __attribute__((always_inline)) void with_activation(Activation act, F&& f) {
  switch (act) {
    case Activation::kSilu:
      f(Silu<M>{});
      break;
    case Activation::kGelu:
      f(Gelu<M>{});
      break;
    case Activation::kGeluTanh:
      f(GeluTanh<M>{});
      break;
  }
}
#endif

}  // namespace swiglu
