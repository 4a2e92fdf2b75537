// The torch side that every backend's glue shares: argument checks and the
// row layout the kernels get.
//
// Kernels see a tensor of shape (..., width) as `rows` rows of `width`
// elements, each contiguous, `row_stride` elements apart. A tensor whose
// leading dimensions collapse into one row stride (any contiguous tensor, a
// slice of a wider buffer, a broadcast row, ...) is used in place; any other
// layout (e.g. a transposed batch or a strided last dimension) is copied into
// a contiguous tensor, and an output in such a layout gets a temporary that
// is copied back. So every layout is accepted; only the copies cost extra.
//
// Included by the CPU, CUDA/ROCm, Metal and XPU glue; a variant compiles
// exactly one of them.
#pragma once

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <vector>

#include "swiglu_common/activations.h"

namespace swiglu {

inline const char* op_name(Activation act, bool backward) {
  switch (act) {
    case Activation::kSilu:
      return backward ? "silu_and_mul_backward" : "silu_and_mul";
    case Activation::kGelu:
      return backward ? "gelu_and_mul_backward" : "gelu_and_mul";
    case Activation::kGeluTanh:
      return backward ? "gelu_tanh_and_mul_backward" : "gelu_tanh_and_mul";
  }
  return "act_and_mul";
}

// A tensor as the kernels address it: rows of contiguous elements.
struct Rows {
  at::Tensor tensor;
  int64_t stride = 0;  // elements between consecutive rows
};

// The row stride if the leading dimensions of t (all but the last) collapse
// into one and the last one is contiguous, else -1. Size-1 dimensions are
// ignored; a single row may have any stride.
inline int64_t collapsed_row_stride(const at::Tensor& t) {
  if (t.size(-1) > 1 && t.stride(-1) != 1) {
    return -1;
  }
  int64_t row_stride = -1;
  int64_t expected = -1;
  for (int64_t i = t.dim() - 2; i >= 0; --i) {
    if (t.size(i) == 1) {
      continue;
    }
    if (row_stride < 0) {
      row_stride = t.stride(i);
    } else if (t.stride(i) != expected) {
      return -1;
    }
    expected = t.stride(i) * t.size(i);
  }
  return row_stride < 0 ? t.size(-1) : row_stride;
}

// t itself when its rows are addressable in place, else a contiguous copy.
inline Rows readable_rows(const at::Tensor& t) {
  const int64_t stride = collapsed_row_stride(t);
  if (stride >= 0) {
    return {t, stride};
  }
  return {t.contiguous(), t.size(-1)};
}

// t itself when the kernels can write its rows in place, else an empty
// contiguous tensor to write instead; copy_back() puts the result into t.
inline Rows writable_rows(const at::Tensor& t) {
  const int64_t stride = collapsed_row_stride(t);
  if (stride >= 0) {
    return {t, stride};
  }
  return {at::empty(t.sizes(), t.options()), t.size(-1)};
}

inline void copy_back(at::Tensor& t, const Rows& written) {
  if (!written.tensor.is_same(t)) {
    t.copy_(written.tensor);
  }
}

// Checks `input` (..., 2 * d) and returns d.
inline int64_t check_input(const char* op, const at::Tensor& input,
                           c10::DeviceType device) {
  TORCH_CHECK(input.dim() >= 1, op,
              ": input must have at least one dimension, got a 0-dim tensor");
  TORCH_CHECK(input.size(-1) % 2 == 0, op,
              ": the last dimension of input must be even (gate and up halves "
              "of size d each), got input of shape ",
              input.sizes());
  TORCH_CHECK(input.device().type() == device, op, ": this is the ",
              c10::DeviceTypeName(device), " implementation, got input on ",
              input.device());
  const at::ScalarType dtype = input.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf,
              op, ": unsupported dtype ", dtype,
              " (expected float32, bfloat16 or float16)");
  return input.size(-1) / 2;
}

// `what` must have the dtype and device of input and the given shape.
inline void check_like(const char* op, const char* what, const at::Tensor& t,
                       const at::Tensor& input, at::IntArrayRef shape) {
  TORCH_CHECK(t.device() == input.device(), op, ": ", what,
              " and input must be on the same device, got ", what, " on ",
              t.device(), " and input on ", input.device());
  TORCH_CHECK(t.scalar_type() == input.scalar_type(), op, ": ", what,
              " and input must have the same dtype, got ", what, " ",
              t.scalar_type(), " and input ", input.scalar_type());
  TORCH_CHECK(t.sizes() == shape, op, ": ", what, " must have shape ", shape,
              " for input of shape ", input.sizes(), ", got ", t.sizes());
}

inline std::vector<int64_t> half_width_shape(const at::Tensor& input, int64_t d) {
  std::vector<int64_t> shape(input.sizes().begin(), input.sizes().end());
  shape.back() = d;
  return shape;
}

// Calls f(scalar_t{}) for the dtypes the ops support (checked before).
template <class F>
void with_scalar_type(at::ScalarType dtype, F&& f) {
  switch (dtype) {
    case at::kFloat:
      f(float{});
      break;
    case at::kBFloat16:
      f(c10::BFloat16{});
      break;
    case at::kHalf:
      f(c10::Half{});
      break;
    default:
      TORCH_CHECK(false, "swiglu: unsupported dtype ", dtype);
  }
}

// What a kernel launch gets: rows x d outputs, every tensor as Rows.
struct ForwardRows {
  int64_t rows, d;
  Rows out, input;
};
struct BackwardRows {
  int64_t rows, d;
  Rows grad_input, grad_out, input;
};

// out = act(input[..., :d]) * input[..., d:]: checks, then
// launch(const ForwardRows&) unless there is nothing to compute. The caller
// sets up its device guard first (copies are made on input's device).
template <class Launch>
void run_forward(Activation act, c10::DeviceType device, at::Tensor& out,
                 const at::Tensor& input, Launch&& launch) {
  const char* op = op_name(act, false);
  const int64_t d = check_input(op, input, device);
  check_like(op, "out", out, input, half_width_shape(input, d));
  if (out.numel() == 0) {
    return;
  }
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, input);
  const ForwardRows r{out.numel() / d, d, writable_rows(out), readable_rows(input)};
  launch(r);
  copy_back(out, r.out);
}

// grad_input[..., :d] = grad_out * u * act'(g), grad_input[..., d:] =
// grad_out * act(g), with g, u the halves of input.
template <class Launch>
void run_backward(Activation act, c10::DeviceType device, at::Tensor& grad_input,
                  const at::Tensor& grad_out, const at::Tensor& input,
                  Launch&& launch) {
  const char* op = op_name(act, true);
  const int64_t d = check_input(op, input, device);
  check_like(op, "grad_out", grad_out, input, half_width_shape(input, d));
  check_like(op, "grad_input", grad_input, input, input.sizes());
  if (grad_input.numel() == 0) {
    return;
  }
  at::assert_no_internal_overlap(grad_input);
  at::assert_no_overlap(grad_input, input);
  at::assert_no_overlap(grad_input, grad_out);
  const BackwardRows r{grad_out.numel() / d, d, writable_rows(grad_input),
                       readable_rows(grad_out), readable_rows(input)};
  launch(r);
  copy_back(grad_input, r.grad_input);
}

}  // namespace swiglu
