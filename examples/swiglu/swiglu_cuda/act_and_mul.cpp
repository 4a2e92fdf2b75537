// The torch glue of the CUDA and ROCm backends: checks and row layouts
// (swiglu_common/torch_args.h), device guard, current stream and the dtype
// dispatch. The kernels are in act_and_mul_kernel.cu, which includes no torch
// header; gpu_compat.h maps the CUDA/HIP names, so hipcc compiles this same
// file for the rocm unit without hipify. No device code here, so the host
// compiler builds it once, not nvcc once per architecture.
#include <cstdint>
#include <limits>

#include "swiglu_common/torch_args.h"
#include "swiglu_cuda/act_and_mul_kernel.h"
#include "swiglu_cuda/gpu_compat.h"
#include "torch-ext/torch_binding.h"

namespace swiglu {
namespace {

// Rows are the grid's x dimension.
void check_rows(Activation act, bool backward, int64_t rows) {
  TORCH_CHECK(rows <= std::numeric_limits<int32_t>::max(), op_name(act, backward),
              ": too many rows (", rows, "); at most 2^31 - 1 are supported");
}

}  // namespace

void act_and_mul(Activation act, at::Tensor& out, const at::Tensor& input) {
  run_forward(act, c10::DeviceType::CUDA, out, input, [&](const ForwardRows& r) {
    check_rows(act, false, r.rows);
    const gpu_compat::OptionalDeviceGuard guard(input.device());
    with_scalar_type(input.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      gpu_compat::check_launch(
          act_and_mul_launch(act, gpu_compat::device_ptr(r.out.tensor.data_ptr<T>()),
                             gpu_compat::device_ptr(r.input.tensor.const_data_ptr<T>()),
                             r.rows, r.d, r.out.stride, r.input.stride,
                             gpu_compat::current_stream()),
          op_name(act, false));
    });
  });
}

void act_and_mul_backward(Activation act, at::Tensor& grad_input, const at::Tensor& grad_out,
                          const at::Tensor& input) {
  run_backward(act, c10::DeviceType::CUDA, grad_input, grad_out, input,
               [&](const BackwardRows& r) {
                 check_rows(act, true, r.rows);
                 const gpu_compat::OptionalDeviceGuard guard(input.device());
                 with_scalar_type(input.scalar_type(), [&](auto tag) {
                   using T = decltype(tag);
                   gpu_compat::check_launch(
                       act_and_mul_backward_launch(
                           act, gpu_compat::device_ptr(r.grad_input.tensor.data_ptr<T>()),
                           gpu_compat::device_ptr(r.grad_out.tensor.const_data_ptr<T>()),
                           gpu_compat::device_ptr(r.input.tensor.const_data_ptr<T>()), r.rows,
                           r.d, r.grad_input.stride, r.grad_out.stride, r.input.stride,
                           gpu_compat::current_stream()),
                       op_name(act, true));
                 });
               });
}

}  // namespace swiglu
