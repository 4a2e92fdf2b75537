// The CPU backend's torch glue: argument checks (flash_attn_common/), the
// choice of instruction set, the workspace, and torch's thread pool for the
// kernels (kernel.h, compiled once per ISA).
//
// The ISA is picked once per process by CPUID: avx512_bf16 (bf16 forward
// with vdpbf16ps) > avx512 (fp32 FMA tiles) > portable. The environment
// variable FLASH_ATTN_CPU_ISA=portable|avx512|avx512_bf16, read at the first
// call, caps it (the tests run every path this way). fp16 inputs are computed
// through fp32 copies.
#include <ATen/Parallel.h>
#include <torch/all.h>

#include <cctype>
#include <cstdlib>
#include <string>
#include <tuple>

#include "flash_attn_common/torch_args.h"
#include "flash_attn_cpu/cpu_kernels.h"
#include "torch-ext/torch_binding.h"

namespace flash_attn {
namespace cpu {
namespace {

enum class Isa { kPortable = 0, kAvx512 = 1, kAvx512Bf16 = 2 };

Isa detected_isa() {
#if defined(FLASH_ATTN_HAVE_AVX512_UNITS) && (defined(__GNUC__) || defined(__clang__))
  // libgcc's checks include the OS (XCR0) support for the ZMM/opmask state.
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("fma");
  if (!avx512) return Isa::kPortable;
  return __builtin_cpu_supports("avx512bf16") ? Isa::kAvx512Bf16 : Isa::kAvx512;
#else
  return Isa::kPortable;
#endif
}

Isa active_isa() {
  static const Isa isa = [] {
    Isa best = detected_isa();
    if (const char *env = std::getenv("FLASH_ATTN_CPU_ISA")) {
      std::string v(env);
      for (char &ch : v) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      Isa cap = best;
      if (v == "portable") cap = Isa::kPortable;
      else if (v == "avx512") cap = Isa::kAvx512;
      else if (v == "avx512_bf16") cap = Isa::kAvx512Bf16;
      else TORCH_CHECK(v.empty(), "FLASH_ATTN_CPU_ISA must be portable, avx512 or avx512_bf16, got '", env, "'");
      if (static_cast<int>(cap) < static_cast<int>(best)) best = cap;
    }
    return best;
  }();
  return isa;
}

const Kernels &fp32_kernels() {
#if defined(FLASH_ATTN_HAVE_AVX512_UNITS)
  if (active_isa() != Isa::kPortable) return avx512::kernels;
#endif
  return portable::kernels;
}

const Kernels &forward_kernels(DType dtype) {
#if defined(FLASH_ATTN_HAVE_AVX512_UNITS)
  if (dtype == DType::kBFloat16 && active_isa() == Isa::kAvx512Bf16) return avx512_bf16::kernels;
#endif
  return fp32_kernels();
}

void torch_parallel_for(int64_t n, void *ctx, void (*body)(void *, int64_t, int64_t)) {
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) { body(ctx, begin, end); });
}

Runtime runtime() {
  Runtime rt;
  rt.num_threads = at::get_num_threads();
  rt.parallel_for = &torch_parallel_for;
  return rt;
}

// Workspaces (packed K/V blocks, per-thread tiles) are kept for the next call
// on the same thread: a fresh multi-megabyte allocation per call costs a page
// fault per 4 KiB on first touch, about as much as packing itself. Up to
// kKeepBytes stay allocated between calls; larger ones are freed.
constexpr int64_t kKeepBytes = int64_t(256) << 20;

at::Tensor workspace(int64_t bytes) {
  thread_local at::Tensor kept;
  if (kept.defined() && kept.numel() >= bytes) return kept;
  at::Tensor fresh = at::empty({bytes > 0 ? bytes : 1}, at::TensorOptions().dtype(at::kByte));
  kept = bytes <= kKeepBytes ? fresh : at::Tensor();
  return fresh;
}

const char *const kFwd = "flash_attn.fwd";
const char *const kVarlenFwd = "flash_attn.varlen_fwd";
const char *const kBwd = "flash_attn.bwd";
const char *const kVarlenBwd = "flash_attn.varlen_bwd";

std::tuple<at::Tensor, at::Tensor> forward(
    const char *op, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
    const std::optional<at::Tensor> &cu_seqlens_q, const std::optional<at::Tensor> &cu_seqlens_k,
    int64_t max_seqlen_q, int64_t max_seqlen_k, const std::optional<at::Tensor> &alibi_slopes,
    double softmax_scale, bool causal) {
  if (q.scalar_type() == at::kHalf) {
    check_qkv(op, q, k, v, q.dim(), c10::DeviceType::CPU);
    auto [out, lse] = forward(op, q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat),
                              cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                              alibi_slopes, softmax_scale, causal);
    return {out.to(at::kHalf), lse};
  }
  Call c = prepare_forward(op, c10::DeviceType::CPU, q, k, v, cu_seqlens_q, cu_seqlens_k,
                           max_seqlen_q, max_seqlen_k, alibi_slopes, softmax_scale, causal);
  if (c.out.numel() > 0) {
    const Kernels &kernels = forward_kernels(c.params.dtype);
    const Runtime rt = runtime();
    at::Tensor ws = workspace(kernels.fwd_workspace(c.params, rt.num_threads));
    kernels.fwd(c.params, rt, ws.mutable_data_ptr());
  }
  return {c.out, c.lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward(
    const char *op, const at::Tensor &dout, const at::Tensor &q, const at::Tensor &k,
    const at::Tensor &v, const at::Tensor &out, const at::Tensor &lse,
    const std::optional<at::Tensor> &cu_seqlens_q, const std::optional<at::Tensor> &cu_seqlens_k,
    int64_t max_seqlen_q, int64_t max_seqlen_k, const std::optional<at::Tensor> &alibi_slopes,
    double softmax_scale, bool causal) {
  BwdCall c = prepare_backward(op, c10::DeviceType::CPU, dout, q, k, v, out, lse, cu_seqlens_q,
                               cu_seqlens_k, max_seqlen_q, max_seqlen_k, alibi_slopes,
                               softmax_scale, causal);
  if (c.dq.numel() > 0 || c.dk.numel() > 0) {
    const Kernels &kernels = fp32_kernels();
    const Runtime rt = runtime();
    at::Tensor ws = workspace(kernels.bwd_workspace(c.params, rt.num_threads));
    kernels.bwd(c.params, rt, ws.mutable_data_ptr());
  }
  const auto cast = [&](const at::Tensor &t) { return t.to(q.scalar_type()); };
  return {cast(c.dq), cast(c.dk), cast(c.dv)};
}

}  // namespace
}  // namespace cpu
}  // namespace flash_attn

using flash_attn::cpu::backward;
using flash_attn::cpu::forward;

std::tuple<at::Tensor, at::Tensor> mha_fwd(const at::Tensor &q, const at::Tensor &k,
                                           const at::Tensor &v,
                                           const std::optional<at::Tensor> &alibi_slopes,
                                           double softmax_scale, bool causal) {
  return forward(flash_attn::cpu::kFwd, q, k, v, std::nullopt, std::nullopt, 0, 0, alibi_slopes,
                 softmax_scale, causal);
}

std::tuple<at::Tensor, at::Tensor> mha_varlen_fwd(
    const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &cu_seqlens_q,
    const at::Tensor &cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
    const std::optional<at::Tensor> &alibi_slopes, double softmax_scale, bool causal) {
  return forward(flash_attn::cpu::kVarlenFwd, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                 max_seqlen_k, alibi_slopes, softmax_scale, causal);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> mha_bwd(
    const at::Tensor &dout, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
    const at::Tensor &out, const at::Tensor &softmax_lse,
    const std::optional<at::Tensor> &alibi_slopes, double softmax_scale, bool causal) {
  return backward(flash_attn::cpu::kBwd, dout, q, k, v, out, softmax_lse, std::nullopt,
                  std::nullopt, 0, 0, alibi_slopes, softmax_scale, causal);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> mha_varlen_bwd(
    const at::Tensor &dout, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
    const at::Tensor &out, const at::Tensor &softmax_lse, const at::Tensor &cu_seqlens_q,
    const at::Tensor &cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
    const std::optional<at::Tensor> &alibi_slopes, double softmax_scale, bool causal) {
  return backward(flash_attn::cpu::kVarlenBwd, dout, q, k, v, out, softmax_lse, cu_seqlens_q,
                  cu_seqlens_k, max_seqlen_q, max_seqlen_k, alibi_slopes, softmax_scale, causal);
}

std::string cpu_isa() {
  switch (flash_attn::cpu::active_isa()) {
    case flash_attn::cpu::Isa::kAvx512Bf16:
      return "avx512_bf16";
    case flash_attn::cpu::Isa::kAvx512:
      return "avx512";
    default:
      return "portable";
  }
}
