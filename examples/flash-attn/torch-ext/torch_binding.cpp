#include <torch/library.h>

#include "registration.h"
#include "torch_binding.h"

// ROCm builds of torch present HIP devices as CUDA, so the rocm variant
// registers under CUDA too.
#if defined(CPU_KERNEL)
#define FLASH_ATTN_DEVICE torch::kCPU
#define FLASH_ATTN_HAS_BACKWARD 1
#elif defined(CUDA_KERNEL) || defined(ROCM_KERNEL)
#define FLASH_ATTN_DEVICE torch::kCUDA
#define FLASH_ATTN_HAS_BACKWARD 1
#elif defined(METAL_KERNEL)
#define FLASH_ATTN_DEVICE torch::kMPS
#elif defined(XPU_KERNEL)
#define FLASH_ATTN_DEVICE torch::kXPU
#endif

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  // q (batch, seqlen_q, heads, d), k and v (batch, seqlen_k, heads_k, d) with
  // heads % heads_k == 0 and d in {64, 128}; the last dimension contiguous.
  // Returns out (like q) and softmax_lse (batch, heads, seqlen_q), fp32: the
  // natural log of each row's sum of exp(scaled scores), +inf for a row that
  // sees no key (its out row is 0). Causal masks are aligned bottom-right;
  // alibi_slopes (heads,) or (batch, heads), fp32, add
  // -slope * |i + seqlen_k - seqlen_q - j| to the scaled scores.
  ops.def(
      "fwd(Tensor q, Tensor k, Tensor v, Tensor? alibi_slopes, float softmax_scale, "
      "bool causal) -> (Tensor, Tensor)");
  // Packed sequences: q (total_q, heads, d), k/v (total_k, heads_k, d),
  // cu_seqlens_q/k (batch + 1,) int32 offsets; softmax_lse (heads, total_q).
  ops.def(
      "varlen_fwd(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
      "int max_seqlen_q, int max_seqlen_k, Tensor? alibi_slopes, float softmax_scale, "
      "bool causal) -> (Tensor, Tensor)");
  ops.impl("fwd", FLASH_ATTN_DEVICE, &mha_fwd);
  ops.impl("varlen_fwd", FLASH_ATTN_DEVICE, &mha_varlen_fwd);

#if defined(FLASH_ATTN_HAS_BACKWARD)
  // Gradients (dq, dk, dv) of the forward's out, recomputing P from
  // softmax_lse (flash-attn 2's backward), shaped like q, k, v (contiguous),
  // in q's dtype. GQA: dk/dv sum over the q heads of each kv head; rows with
  // softmax_lse +inf (no key seen) get no gradient. Only defined where
  // implemented (CPU, CUDA, ROCm).
  ops.def(
      "bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor softmax_lse, "
      "Tensor? alibi_slopes, float softmax_scale, bool causal) -> (Tensor, Tensor, Tensor)");
  ops.def(
      "varlen_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor softmax_lse, "
      "Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, "
      "Tensor? alibi_slopes, float softmax_scale, bool causal) -> (Tensor, Tensor, Tensor)");
  ops.impl("bwd", FLASH_ATTN_DEVICE, &mha_bwd);
  ops.impl("varlen_bwd", FLASH_ATTN_DEVICE, &mha_varlen_bwd);
#endif

#if defined(CPU_KERNEL)
  // No tensor arguments: a catch-all kernel.
  ops.def("cpu_isa() -> str", &cpu_isa);
#endif
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
