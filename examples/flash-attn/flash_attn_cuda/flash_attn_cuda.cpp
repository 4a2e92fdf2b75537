// The CUDA/ROCm torch glue: argument checks (flash_attn_common/), device
// guard, current stream, then the launcher in flash_fwd_kernel.cu, which
// includes no torch header. gpu_compat.h maps the CUDA/HIP names, so hipcc
// compiles this same file for the rocm unit without hipify. The backward
// (flash_bwd_kernel.cu) works on fp32 copies that prepare_backward makes and
// returns dq, dk, dv in the inputs' dtype.
#include <torch/all.h>

#include "flash_attn_common/torch_args.h"
#include "flash_attn_cuda/flash_bwd_kernel.h"
#include "flash_attn_cuda/flash_fwd_kernel.h"
#include "flash_attn_cuda/gpu_compat.h"
#include "torch-ext/torch_binding.h"

namespace {

// The kernels read 16 bytes at a time: rows must start on 16-byte boundaries
// (pointer and batch/row/head strides in multiples of 8 elements). Anything
// else is copied to a contiguous tensor first.
at::Tensor aligned(const at::Tensor &t) {
  bool ok = reinterpret_cast<uintptr_t>(t.const_data_ptr()) % 16 == 0 && t.stride(-1) == 1;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) ok = ok && (t.size(d) <= 1 || t.stride(d) % 8 == 0);
  return ok ? t : t.contiguous();
}

void check_gpu_dtype(const char *op, const at::Tensor &q) {
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf, op,
              ": on GPUs q, k and v must be bfloat16 or float16 (the tensor-core path), got ",
              q.scalar_type(), "; cast them, e.g. q.to(torch.bfloat16)");
}

std::tuple<at::Tensor, at::Tensor> forward(const char *op, const at::Tensor &q, const at::Tensor &k,
                                           const at::Tensor &v,
                                           const std::optional<at::Tensor> &cu_seqlens_q,
                                           const std::optional<at::Tensor> &cu_seqlens_k,
                                           int64_t max_seqlen_q, int64_t max_seqlen_k,
                                           const std::optional<at::Tensor> &alibi_slopes,
                                           double softmax_scale, bool causal) {
  check_gpu_dtype(op, q);
  const gpu_compat::OptionalDeviceGuard guard(q.device());
  flash_attn::Call c = flash_attn::prepare_forward(
      op, c10::DeviceType::CUDA, aligned(q), aligned(k), aligned(v), cu_seqlens_q, cu_seqlens_k,
      max_seqlen_q, max_seqlen_k, alibi_slopes, softmax_scale, causal);
  if (c.out.numel() > 0) {
    gpu_compat::check_launch(flash_attn::flash_fwd(c.params, gpu_compat::current_stream()),
                             "flash_attn forward kernel launch");
  }
  return {c.out, c.lse};
}

// The backward: fp32 copies of q, k, v and dout, delta = rowsum(dout * out)
// and fp32 dq, dk, dv from prepare_backward; the kernels write every row of
// every sequence, so only varlen rows past the last sequence need zeroing.
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward(
    const char *op, const at::Tensor &dout, const at::Tensor &q, const at::Tensor &k,
    const at::Tensor &v, const at::Tensor &out, const at::Tensor &lse,
    const std::optional<at::Tensor> &cu_seqlens_q, const std::optional<at::Tensor> &cu_seqlens_k,
    int64_t max_seqlen_q, int64_t max_seqlen_k, const std::optional<at::Tensor> &alibi_slopes,
    double softmax_scale, bool causal) {
  check_gpu_dtype(op, q);
  const gpu_compat::OptionalDeviceGuard guard(q.device());
  flash_attn::BwdCall c = flash_attn::prepare_backward(
      op, c10::DeviceType::CUDA, dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k,
      max_seqlen_q, max_seqlen_k, alibi_slopes, softmax_scale, causal);
  if (cu_seqlens_q.has_value()) {
    c.dq.zero_();
    c.dk.zero_();
    c.dv.zero_();
  }
  if (c.dq.numel() > 0 || c.dk.numel() > 0) {
    gpu_compat::check_launch(flash_attn::flash_bwd(c.params, gpu_compat::current_stream()),
                             "flash_attn backward kernel launch");
  }
  const auto cast = [&](const at::Tensor &t) { return t.to(q.scalar_type()); };
  return {cast(c.dq), cast(c.dk), cast(c.dv)};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> mha_fwd(const at::Tensor &q, const at::Tensor &k,
                                           const at::Tensor &v,
                                           const std::optional<at::Tensor> &alibi_slopes,
                                           double softmax_scale, bool causal) {
  return forward("flash_attn.fwd", q, k, v, std::nullopt, std::nullopt, 0, 0, alibi_slopes,
                 softmax_scale, causal);
}

std::tuple<at::Tensor, at::Tensor> mha_varlen_fwd(
    const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &cu_seqlens_q,
    const at::Tensor &cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
    const std::optional<at::Tensor> &alibi_slopes, double softmax_scale, bool causal) {
  return forward("flash_attn.varlen_fwd", q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                 max_seqlen_k, alibi_slopes, softmax_scale, causal);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> mha_bwd(
    const at::Tensor &dout, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
    const at::Tensor &out, const at::Tensor &softmax_lse,
    const std::optional<at::Tensor> &alibi_slopes, double softmax_scale, bool causal) {
  return backward("flash_attn.bwd", dout, q, k, v, out, softmax_lse, std::nullopt, std::nullopt,
                  0, 0, alibi_slopes, softmax_scale, causal);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> mha_varlen_bwd(
    const at::Tensor &dout, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
    const at::Tensor &out, const at::Tensor &softmax_lse, const at::Tensor &cu_seqlens_q,
    const at::Tensor &cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
    const std::optional<at::Tensor> &alibi_slopes, double softmax_scale, bool causal) {
  return backward("flash_attn.varlen_bwd", dout, q, k, v, out, softmax_lse, cu_seqlens_q,
                  cu_seqlens_k, max_seqlen_q, max_seqlen_k, alibi_slopes, softmax_scale, causal);
}
