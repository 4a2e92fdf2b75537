#include <torch/library.h>

#include "registration.h"
#include "torch_binding.h"

namespace {

// One op per activation and direction (the names and schemas of
// kernels-community/activation), all thin wrappers over the backend's
// act_and_mul / act_and_mul_backward.
template <swiglu::Activation A>
void forward(at::Tensor& out, const at::Tensor& input) {
  swiglu::act_and_mul(A, out, input);
}

template <swiglu::Activation A>
void backward(at::Tensor& grad_input, const at::Tensor& grad_out, const at::Tensor& input) {
  swiglu::act_and_mul_backward(A, grad_input, grad_out, input);
}

// ROCm builds of torch present HIP devices as CUDA, so the rocm variant
// registers under CUDA too.
#if defined(CPU_KERNEL)
constexpr c10::DeviceType kDevice = c10::DeviceType::CPU;
#elif defined(CUDA_KERNEL) || defined(ROCM_KERNEL)
constexpr c10::DeviceType kDevice = c10::DeviceType::CUDA;
#elif defined(METAL_KERNEL)
constexpr c10::DeviceType kDevice = c10::DeviceType::MPS;
#elif defined(XPU_KERNEL)
constexpr c10::DeviceType kDevice = c10::DeviceType::XPU;
#endif

}  // namespace

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  using swiglu::Activation;
  // input: (..., 2 * d), gate half first. out: (..., d), written in place.
  // silu_and_mul:      out = silu(input[..., :d]) * input[..., d:]
  // gelu_and_mul:      out = gelu(input[..., :d]) * input[..., d:]  (exact, erf)
  // gelu_tanh_and_mul: the same with GELU's tanh approximation
  ops.def("silu_and_mul(Tensor! out, Tensor input) -> ()");
  ops.def("gelu_and_mul(Tensor! out, Tensor input) -> ()");
  ops.def("gelu_tanh_and_mul(Tensor! out, Tensor input) -> ()");
  // grad_input: (..., 2 * d), the gradient with respect to input, written in
  // place, from grad_out: (..., d), the gradient with respect to out.
  ops.def("silu_and_mul_backward(Tensor! grad_input, Tensor grad_out, Tensor input) -> ()");
  ops.def("gelu_and_mul_backward(Tensor! grad_input, Tensor grad_out, Tensor input) -> ()");
  ops.def("gelu_tanh_and_mul_backward(Tensor! grad_input, Tensor grad_out, Tensor input) -> ()");

  ops.impl("silu_and_mul", kDevice, &forward<Activation::kSilu>);
  ops.impl("gelu_and_mul", kDevice, &forward<Activation::kGelu>);
  ops.impl("gelu_tanh_and_mul", kDevice, &forward<Activation::kGeluTanh>);
  ops.impl("silu_and_mul_backward", kDevice, &backward<Activation::kSilu>);
  ops.impl("gelu_and_mul_backward", kDevice, &backward<Activation::kGelu>);
  ops.impl("gelu_tanh_and_mul_backward", kDevice, &backward<Activation::kGeluTanh>);

#if defined(CPU_KERNEL)
  // Which CPU path the ops take in this process (no tensor arguments, so it
  // is registered as a catch-all kernel).
  ops.def("avx512_enabled() -> bool", &swiglu::cpu::avx512_enabled);
  // What the Python API allocates CPU results with (a catch-all too).
  ops.def("new_output(int[] size, ScalarType dtype) -> Tensor", &swiglu::cpu::new_output);
#endif
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
