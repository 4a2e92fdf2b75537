// Argument checks and layout preparation shared by every backend's torch glue
// (CPU, CUDA/ROCm .cpp glue, Metal .mm, XPU). Torch headers only: never
// include this from a .cu kernel file.
//
// Each op is validated the same way on every backend, so the Python package
// and the tests see one set of rules and error messages.
#pragma once

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace layer_norm_ops {
namespace checks {

// If t's last dimension has stride 1 and its leading dimensions collapse into
// one evenly strided row dimension, returns the element stride between rows;
// otherwise -1. Size-1 dimensions are ignored; a single row reports n.
inline int64_t row_stride(const at::Tensor& t) {
  const int64_t n = t.size(-1);
  if (t.stride(-1) != 1 && n > 1) {
    return -1;
  }
  int64_t stride = -1;
  int64_t expected = -1;
  for (int64_t i = t.dim() - 2; i >= 0; --i) {
    if (t.size(i) == 1) {
      continue;
    }
    if (stride < 0) {
      stride = t.stride(i);
    } else if (t.stride(i) != expected) {
      return -1;
    }
    expected = t.stride(i) * t.size(i);
  }
  return stride < 0 ? n : stride;
}

// An input tensor as evenly strided rows: itself when its layout allows, else
// a contiguous copy. Returns the tensor and its row stride.
inline std::pair<at::Tensor, int64_t> input_rows(const at::Tensor& t) {
  const int64_t stride = row_stride(t);
  if (stride >= 0) {
    return {t, stride};
  }
  at::Tensor c = t.contiguous();
  return {c, c.size(-1)};
}

// An output tensor's row stride; refuses layouts the kernels cannot write.
inline int64_t output_rows(const at::Tensor& t, const char* op,
                           const char* name) {
  const int64_t stride = row_stride(t);
  TORCH_CHECK(stride >= 0, op, ": ", name,
              " must have a contiguous last dimension and evenly strided rows "
              "(e.g. a contiguous tensor), got sizes ", t.sizes(),
              " and strides ", t.strides());
  if (t.numel() > 0) {
    at::assert_no_internal_overlap(t);
  }
  return stride;
}

inline bool dtype_supported(at::ScalarType dtype, bool allow_double) {
  return dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf ||
         (allow_double && dtype == at::kDouble);
}

// The dtype of mean/rstd for an input dtype.
inline at::ScalarType stats_dtype(at::ScalarType dtype) {
  return dtype == at::kDouble ? at::kDouble : at::kFloat;
}

inline void check_like(const at::Tensor& t, const at::Tensor& input,
                       const char* op, const char* name) {
  TORCH_CHECK(t.device() == input.device(), op, ": ", name,
              " must be on the input's device ", input.device(), ", got ",
              t.device());
  TORCH_CHECK(t.scalar_type() == input.scalar_type(), op, ": ", name,
              " must have the input's dtype ", input.scalar_type(), ", got ",
              t.scalar_type());
  TORCH_CHECK(t.sizes() == input.sizes(), op, ": ", name,
              " must have the input's shape ", input.sizes(), ", got ",
              t.sizes());
}

// A per-column parameter (weight, bias): n elements of the input's dtype on
// its device. Returned contiguous (copied if needed), flattened to (n,).
inline at::Tensor column_param(const at::Tensor& p, const at::Tensor& input,
                               int64_t n, const char* op, const char* name) {
  TORCH_CHECK(p.device() == input.device(), op, ": ", name,
              " must be on the input's device ", input.device(), ", got ",
              p.device());
  TORCH_CHECK(p.scalar_type() == input.scalar_type(), op, ": ", name,
              " must have the input's dtype ", input.scalar_type(), ", got ",
              p.scalar_type(),
              " (cast it, or use the Python API, which handles mixed dtypes)");
  TORCH_CHECK(p.numel() == n, op, ": ", name, " must have ", n,
              " elements (the input's last dimension), got shape ", p.sizes());
  return p.contiguous().view({n});
}

// A per-row statistic (mean, rstd): `rows` contiguous values.
inline void check_stats(const at::Tensor& s, const at::Tensor& input,
                        int64_t rows, const char* op, const char* name) {
  TORCH_CHECK(s.device() == input.device(), op, ": ", name,
              " must be on the input's device ", input.device(), ", got ",
              s.device());
  TORCH_CHECK(s.scalar_type() == stats_dtype(input.scalar_type()), op, ": ",
              name, " must be ", stats_dtype(input.scalar_type()), " for ",
              input.scalar_type(), " input, got ", s.scalar_type());
  TORCH_CHECK(s.numel() == rows, op, ": ", name, " must have one value per row (",
              rows, "), got shape ", s.sizes());
  TORCH_CHECK(s.is_contiguous(), op, ": ", name, " must be contiguous");
}

// Everything a forward kernel needs, validated. Absent optionals stay
// undefined tensors.
struct NormFwd {
  at::Tensor input, residual, out, residual_out, mean, rstd, weight, bias;
  int64_t rows = 0;
  int64_t n = 0;
  int64_t input_stride = 0, residual_stride = 0;
  int64_t out_stride = 0, residual_out_stride = 0;
};

inline NormFwd prepare_fwd(const char* op, const at::Tensor& out,
                           const std::optional<at::Tensor>& residual_out,
                           const at::Tensor* mean, const at::Tensor& rstd,
                           const at::Tensor& input,
                           const std::optional<at::Tensor>& residual,
                           const std::optional<at::Tensor>& weight,
                           const std::optional<at::Tensor>& bias,
                           bool allow_double) {
  TORCH_CHECK(input.dim() >= 1, op,
              ": input must have at least one dimension, got a 0-dim tensor");
  TORCH_CHECK(dtype_supported(input.scalar_type(), allow_double), op,
              ": unsupported dtype ", input.scalar_type(), " (expected float32, ",
              "bfloat16 or float16", allow_double ? " or float64)" : ")");
  NormFwd f;
  f.n = input.size(-1);
  TORCH_CHECK(f.n > 0, op, ": the normalized (last) dimension must not be empty");
  f.rows = input.numel() / f.n;

  check_like(out, input, op, "out");
  const bool has_residual = residual.has_value() && residual->defined();
  const bool has_residual_out = residual_out.has_value() && residual_out->defined();
  TORCH_CHECK(has_residual == has_residual_out, op,
              ": residual and residual_out must be given together (the fused "
              "residual add writes input + residual to residual_out)");
  if (mean != nullptr) {
    check_stats(*mean, input, f.rows, op, "mean");
    f.mean = *mean;
  }
  check_stats(rstd, input, f.rows, op, "rstd");
  f.rstd = rstd;
  if (weight.has_value() && weight->defined()) {
    f.weight = column_param(*weight, input, f.n, op, "weight");
  }
  if (bias.has_value() && bias->defined()) {
    f.bias = column_param(*bias, input, f.n, op, "bias");
  }

  f.out = out;
  f.out_stride = output_rows(out, op, "out");
  std::tie(f.input, f.input_stride) = input_rows(input);
  if (has_residual) {
    check_like(*residual, input, op, "residual");
    check_like(*residual_out, input, op, "residual_out");
    std::tie(f.residual, f.residual_stride) = input_rows(*residual);
    f.residual_out = *residual_out;
    f.residual_out_stride = output_rows(*residual_out, op, "residual_out");
  }
  if (f.rows > 0) {
    // Outputs may not share memory with inputs or with each other (as far as
    // ATen's overlap check can tell).
    at::assert_no_overlap(out, input);
    if (has_residual) {
      at::assert_no_overlap(out, *residual);
      at::assert_no_overlap(*residual_out, input);
      at::assert_no_overlap(*residual_out, *residual);
      at::assert_no_overlap(*residual_out, out);
    }
  }
  return f;
}

// Everything a backward kernel needs, validated.
struct NormBwd {
  at::Tensor grad_input, grad_weight, grad_bias, grad_out, grad_residual_out;
  at::Tensor input, mean, rstd, weight;
  int64_t rows = 0;
  int64_t n = 0;
  int64_t grad_input_stride = 0, grad_out_stride = 0;
  int64_t grad_residual_out_stride = 0, input_stride = 0;
};

inline NormBwd prepare_bwd(const char* op, const at::Tensor& grad_input,
                           const std::optional<at::Tensor>& grad_weight,
                           const std::optional<at::Tensor>* grad_bias,
                           const at::Tensor& grad_out,
                           const std::optional<at::Tensor>& grad_residual_out,
                           const at::Tensor& input, const at::Tensor* mean,
                           const at::Tensor& rstd,
                           const std::optional<at::Tensor>& weight,
                           bool allow_double) {
  TORCH_CHECK(input.dim() >= 1, op,
              ": input must have at least one dimension, got a 0-dim tensor");
  TORCH_CHECK(dtype_supported(input.scalar_type(), allow_double), op,
              ": unsupported dtype ", input.scalar_type(), " (expected float32, ",
              "bfloat16 or float16", allow_double ? " or float64)" : ")");
  NormBwd b;
  b.n = input.size(-1);
  TORCH_CHECK(b.n > 0, op, ": the normalized (last) dimension must not be empty");
  b.rows = input.numel() / b.n;

  check_like(grad_input, input, op, "grad_input");
  check_like(grad_out, input, op, "grad_out");
  if (mean != nullptr) {
    check_stats(*mean, input, b.rows, op, "mean");
    b.mean = *mean;
  }
  check_stats(rstd, input, b.rows, op, "rstd");
  b.rstd = rstd;
  if (weight.has_value() && weight->defined()) {
    b.weight = column_param(*weight, input, b.n, op, "weight");
  }
  const auto column_grad = [&](const std::optional<at::Tensor>& g,
                               const char* name) -> at::Tensor {
    if (!g.has_value() || !g->defined()) {
      return at::Tensor();
    }
    TORCH_CHECK(g->device() == input.device() &&
                    g->scalar_type() == input.scalar_type() &&
                    g->numel() == b.n && g->is_contiguous(),
                op, ": ", name, " must be a contiguous tensor of ", b.n,
                " elements with the input's dtype and device, got shape ",
                g->sizes(), ", dtype ", g->scalar_type(), " on ", g->device());
    return *g;
  };
  b.grad_weight = column_grad(grad_weight, "grad_weight");
  TORCH_CHECK(!b.grad_weight.defined() || b.weight.defined(), op,
              ": grad_weight needs the weight (there is none without it)");
  if (grad_bias != nullptr) {
    b.grad_bias = column_grad(*grad_bias, "grad_bias");
  }

  b.grad_input = grad_input;
  b.grad_input_stride = output_rows(grad_input, op, "grad_input");
  std::tie(b.grad_out, b.grad_out_stride) = input_rows(grad_out);
  std::tie(b.input, b.input_stride) = input_rows(input);
  if (grad_residual_out.has_value() && grad_residual_out->defined()) {
    check_like(*grad_residual_out, input, op, "grad_residual_out");
    std::tie(b.grad_residual_out, b.grad_residual_out_stride) =
        input_rows(*grad_residual_out);
  }
  if (b.rows > 0) {
    at::assert_no_overlap(grad_input, grad_out);
    at::assert_no_overlap(grad_input, input);
    if (b.grad_residual_out.defined()) {
      at::assert_no_overlap(grad_input, b.grad_residual_out);
    }
  }
  return b;
}

// silu_and_mul: validated input (gate half, then up half) and output.
struct SiluAndMul {
  at::Tensor input, out;
  int64_t rows = 0, d = 0, input_stride = 0, out_stride = 0;
};

inline SiluAndMul prepare_silu_and_mul(const at::Tensor& out,
                                       const at::Tensor& input,
                                       bool allow_double) {
  const char* op = "silu_and_mul";
  TORCH_CHECK(input.dim() >= 1, op,
              ": input must have at least one dimension, got a 0-dim tensor");
  TORCH_CHECK(dtype_supported(input.scalar_type(), allow_double), op,
              ": unsupported dtype ", input.scalar_type(), " (expected float32, ",
              "bfloat16 or float16", allow_double ? " or float64)" : ")");
  const int64_t width = input.size(-1);
  TORCH_CHECK(width % 2 == 0, op,
              ": the last dimension of input must be even (gate and up halves), "
              "got input of shape ", input.sizes());
  SiluAndMul s;
  s.d = width / 2;
  TORCH_CHECK(out.device() == input.device(), op,
              ": out must be on the input's device ", input.device(), ", got ",
              out.device());
  TORCH_CHECK(out.scalar_type() == input.scalar_type(), op,
              ": out must have the input's dtype ", input.scalar_type(),
              ", got ", out.scalar_type());
  std::vector<int64_t> shape(input.sizes().begin(), input.sizes().end());
  shape.back() = s.d;
  TORCH_CHECK(out.sizes() == at::IntArrayRef(shape), op, ": out must have shape ",
              at::IntArrayRef(shape), " for input of shape ", input.sizes(),
              ", got ", out.sizes());
  s.rows = s.d == 0 ? 0 : out.numel() / s.d;
  s.out = out;
  if (s.rows == 0) {
    return s;
  }
  s.out_stride = output_rows(out, op, "out");
  std::tie(s.input, s.input_stride) = input_rows(input);
  at::assert_no_overlap(out, input);
  return s;
}

}  // namespace checks
}  // namespace layer_norm_ops
