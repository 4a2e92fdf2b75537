#pragma once

#include <torch/all.h>

#include <optional>
#include <string>
#include <tuple>

// Every backend source defines these (only the backend being built is
// compiled into a variant). Shapes and semantics: torch_binding.cpp.

std::tuple<at::Tensor, at::Tensor> mha_fwd(const at::Tensor &q, const at::Tensor &k,
                                           const at::Tensor &v,
                                           const std::optional<at::Tensor> &alibi_slopes,
                                           double softmax_scale, bool causal);

std::tuple<at::Tensor, at::Tensor> mha_varlen_fwd(
    const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &cu_seqlens_q,
    const at::Tensor &cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
    const std::optional<at::Tensor> &alibi_slopes, double softmax_scale, bool causal);

// The backward: defined by the backends that have one (CPU, CUDA, ROCm).
std::tuple<at::Tensor, at::Tensor, at::Tensor> mha_bwd(
    const at::Tensor &dout, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
    const at::Tensor &out, const at::Tensor &softmax_lse,
    const std::optional<at::Tensor> &alibi_slopes, double softmax_scale, bool causal);

std::tuple<at::Tensor, at::Tensor, at::Tensor> mha_varlen_bwd(
    const at::Tensor &dout, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
    const at::Tensor &out, const at::Tensor &softmax_lse, const at::Tensor &cu_seqlens_q,
    const at::Tensor &cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
    const std::optional<at::Tensor> &alibi_slopes, double softmax_scale, bool causal);

// CPU only: the instruction set the CPU kernels use in this process
// ("avx512_bf16", "avx512" or "portable").
std::string cpu_isa();
