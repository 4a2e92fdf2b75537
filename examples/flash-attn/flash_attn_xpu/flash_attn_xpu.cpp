// The forward on Intel GPUs: a SYCL kernel on torch's current XPU queue
// (icpx -fsycl), one work-item per (sequence, head, query), fp32 math, the
// online softmax of the CPU and CUDA kernels. Complete and simple rather than
// fast (no tiling through local memory, no XMX). Forward only.
#include <torch/all.h>

#include <c10/core/DeviceGuard.h>
#include <c10/xpu/XPUStream.h>
#include <sycl/sycl.hpp>

#include <cstdint>

#include "flash_attn_common/torch_args.h"
#include "torch-ext/torch_binding.h"

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Element access by dtype: fp32 as is, fp16 through sycl::half, bf16 as the
// top 16 bits of an fp32 (rounded to nearest even on the way back).
template <flash_attn::DType kType>
struct Elem;
template <>
struct Elem<flash_attn::DType::kFloat32> {
  using T = float;
  static float load(const T *p, int64_t i) { return p[i]; }
  static void store(T *p, int64_t i, float f) { p[i] = f; }
};
template <>
struct Elem<flash_attn::DType::kFloat16> {
  using T = sycl::half;
  static float load(const T *p, int64_t i) { return static_cast<float>(p[i]); }
  static void store(T *p, int64_t i, float f) { p[i] = static_cast<sycl::half>(f); }
};
template <>
struct Elem<flash_attn::DType::kBFloat16> {
  using T = uint16_t;
  static float load(const T *p, int64_t i) {
    return sycl::bit_cast<float>(static_cast<uint32_t>(p[i]) << 16);
  }
  static void store(T *p, int64_t i, float f) {
    uint32_t u = sycl::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      p[i] = 0x7fc0;  // NaN
      return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    p[i] = static_cast<uint16_t>(u >> 16);
  }
};

template <flash_attn::DType kType, int D>
void launch(sycl::queue &queue, const flash_attn::FwdParams &p) {
  using E = Elem<kType>;
  using T = typename E::T;
  const T *q = static_cast<const T *>(p.q);
  const T *k = static_cast<const T *>(p.k);
  const T *v = static_cast<const T *>(p.v);
  T *out = static_cast<T *>(p.out);
  const sycl::range<3> grid(static_cast<size_t>(p.batch), static_cast<size_t>(p.heads),
                            static_cast<size_t>(p.seqlen_q));
  queue.parallel_for(grid, [=](sycl::id<3> idx) {
    const int64_t b = static_cast<int64_t>(idx[0]), h = static_cast<int64_t>(idx[1]);
    const int64_t i = static_cast<int64_t>(idx[2]);
    const int64_t sq = p.len_q(b), sk = p.len_k(b);
    if (i >= sq) return;  // varlen: a shorter sequence
    const int64_t kvh = h / (p.heads / p.heads_k);
    const int64_t off = sk - sq;  // query i sees keys j <= i + off when causal
    int64_t kend = sk;
    if (p.causal) kend = sycl::clamp<int64_t>(i + off + 1, 0, sk);
    const float scale2 = p.softmax_scale * kLog2e;
    const float slope2 = p.alibi_slope(b, h) * kLog2e;

    float qv[D], acc[D];
    const int64_t qo = p.q_offset(b, i, h);
    for (int d = 0; d < D; ++d) qv[d] = E::load(q, qo + d), acc[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = 0; j < kend; ++j) {
      const int64_t ko = p.k_offset(b, j, kvh), vo = p.v_offset(b, j, kvh);
      float dot = 0.0f;
      for (int d = 0; d < D; ++d) dot += qv[d] * E::load(k, ko + d);
      const float s = dot * scale2 - slope2 * sycl::fabs(static_cast<float>(i + off - j));
      if (s > m) {  // a new max: rescale what the row has so far (0 the first time)
        const float alpha = sycl::exp2(m - s);
        l *= alpha;
        for (int d = 0; d < D; ++d) acc[d] *= alpha;
        m = s;
      }
      const float pj = sycl::exp2(s - m);
      l += pj;
      for (int d = 0; d < D; ++d) acc[d] += pj * E::load(v, vo + d);
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int64_t oo = p.o_offset(b, i, h);
    for (int d = 0; d < D; ++d) E::store(out, oo + d, acc[d] * inv);
    p.lse[p.lse_offset(b, i, h)] = l > 0.0f ? (m + sycl::log2(l)) * kLn2 : INFINITY;
  });
}

template <flash_attn::DType kType>
void launch_dtype(sycl::queue &queue, const flash_attn::FwdParams &p) {
  if (p.head_dim == 64) {
    launch<kType, 64>(queue, p);
  } else {
    launch<kType, 128>(queue, p);
  }
}

std::tuple<at::Tensor, at::Tensor> forward(const char *op, const at::Tensor &q, const at::Tensor &k,
                                           const at::Tensor &v,
                                           const std::optional<at::Tensor> &cu_seqlens_q,
                                           const std::optional<at::Tensor> &cu_seqlens_k,
                                           int64_t max_seqlen_q, int64_t max_seqlen_k,
                                           const std::optional<at::Tensor> &alibi_slopes,
                                           double softmax_scale, bool causal) {
  const c10::DeviceGuard guard(q.device());
  flash_attn::Call c = flash_attn::prepare_forward(op, c10::DeviceType::XPU, q, k, v, cu_seqlens_q,
                                                   cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                                   alibi_slopes, softmax_scale, causal);
  const flash_attn::FwdParams &p = c.params;
  if (c.out.numel() > 0 && p.batch > 0 && p.seqlen_q > 0) {
    sycl::queue &queue = c10::xpu::getCurrentXPUStream(q.device().index()).queue();
    switch (p.dtype) {
      case flash_attn::DType::kFloat32:
        launch_dtype<flash_attn::DType::kFloat32>(queue, p);
        break;
      case flash_attn::DType::kFloat16:
        launch_dtype<flash_attn::DType::kFloat16>(queue, p);
        break;
      case flash_attn::DType::kBFloat16:
        launch_dtype<flash_attn::DType::kBFloat16>(queue, p);
        break;
    }
  }
  return {c.out, c.lse};
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
