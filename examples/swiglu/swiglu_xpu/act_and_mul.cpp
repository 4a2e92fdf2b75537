// The XPU backend for Intel GPUs: checks and row layouts
// (swiglu_common/torch_args.h), then a SYCL parallel_for over the (rows, d)
// grid on torch's current XPU queue, the math from
// swiglu_common/activations.h in fp32. Compiled with icpx -fsycl.
#include <torch/all.h>

#include <c10/core/DeviceGuard.h>
#include <c10/xpu/XPUStream.h>
#include <sycl/sycl.hpp>

#include <cstdint>

#include "swiglu_common/activations.h"
#include "swiglu_common/torch_args.h"
#include "torch-ext/torch_binding.h"

namespace swiglu {
namespace {

// The activations.h math policy in SYCL device code.
struct SyclMath {
  using V = float;
  static float exp_neg(float x) { return sycl::exp(x); }
  static float recip(float x) { return 1.0f / x; }
  static float neg_abs(float x) { return -sycl::fabs(x); }
  static float select_neg(float z, float a, float b) { return z < 0.0f ? a : b; }
  static float fma(float a, float b, float c) { return sycl::fma(a, b, c); }
};

sycl::queue& queue_of(const at::Tensor& t) {
  return c10::xpu::getCurrentXPUStream(t.device().index()).queue();
}

// fp64 is optional on Intel GPUs; the ops only take float, half and bfloat16,
// which c10's types convert to and from float in device code.
template <class A, typename T>
void forward(sycl::queue& queue, const ForwardRows& r) {
  T* out = r.out.tensor.data_ptr<T>();
  const T* in = r.input.tensor.const_data_ptr<T>();
  const int64_t d = r.d;
  const int64_t os = r.out.stride;
  const int64_t is = r.input.stride;
  queue.parallel_for(sycl::range<2>(static_cast<size_t>(r.rows), static_cast<size_t>(d)),
                     [=](sycl::item<2> item) {
                       const int64_t row = static_cast<int64_t>(item[0]);
                       const int64_t j = static_cast<int64_t>(item[1]);
                       const T* gate = in + row * is;
                       out[row * os + j] = static_cast<T>(act_and_mul<SyclMath, A>(
                           static_cast<float>(gate[j]), static_cast<float>(gate[d + j])));
                     });
}

template <class A, typename T>
void backward(sycl::queue& queue, const BackwardRows& r) {
  T* grad_input = r.grad_input.tensor.data_ptr<T>();
  const T* grad_out = r.grad_out.tensor.const_data_ptr<T>();
  const T* in = r.input.tensor.const_data_ptr<T>();
  const int64_t d = r.d;
  const int64_t gis = r.grad_input.stride;
  const int64_t gos = r.grad_out.stride;
  const int64_t is = r.input.stride;
  queue.parallel_for(sycl::range<2>(static_cast<size_t>(r.rows), static_cast<size_t>(d)),
                     [=](sycl::item<2> item) {
                       const int64_t row = static_cast<int64_t>(item[0]);
                       const int64_t j = static_cast<int64_t>(item[1]);
                       const T* gate = in + row * is;
                       const GradPair<float> grad = act_and_mul_grad<SyclMath, A>(
                           static_cast<float>(gate[j]), static_cast<float>(gate[d + j]),
                           static_cast<float>(grad_out[row * gos + j]));
                       T* d_gate = grad_input + row * gis;
                       d_gate[j] = static_cast<T>(grad.gate);
                       d_gate[d + j] = static_cast<T>(grad.up);
                     });
}

}  // namespace

void act_and_mul(Activation act, at::Tensor& out, const at::Tensor& input) {
  run_forward(act, c10::DeviceType::XPU, out, input, [&](const ForwardRows& r) {
    const c10::DeviceGuard guard(input.device());
    with_scalar_type(input.scalar_type(), [&](auto tag) {
      with_activation<SyclMath>(act, [&](auto a) {
        forward<decltype(a), decltype(tag)>(queue_of(input), r);
      });
    });
  });
}

void act_and_mul_backward(Activation act, at::Tensor& grad_input, const at::Tensor& grad_out,
                          const at::Tensor& input) {
  run_backward(act, c10::DeviceType::XPU, grad_input, grad_out, input,
               [&](const BackwardRows& r) {
                 const c10::DeviceGuard guard(input.device());
                 with_scalar_type(input.scalar_type(), [&](auto tag) {
                   with_activation<SyclMath>(act, [&](auto a) {
                     backward<decltype(a), decltype(tag)>(queue_of(input), r);
                   });
                 });
               });
}

}  // namespace swiglu
