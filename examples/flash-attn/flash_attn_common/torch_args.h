// The torch side that every backend's glue shares: argument checks with
// one-line errors, the output allocation, and FwdParams/BwdParams from
// tensors. A backend's glue checks its device, calls prepare_forward /
// prepare_backward and hands the params to its kernels.
#pragma once

#include <torch/all.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "flash_attn_common/params.h"

namespace flash_attn {

inline bool supported_head_dim(int64_t d) {
  for (int h : kHeadDims) {
    if (d == h) return true;
  }
  return false;
}

inline DType dtype_of(const char *op, at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return DType::kFloat32;
    case at::kBFloat16:
      return DType::kBFloat16;
    case at::kHalf:
      return DType::kFloat16;
    default:
      TORCH_CHECK(false, op, ": unsupported dtype ", t,
                  " (expected float32, bfloat16 or float16)");
  }
}

// t itself when its last dimension is contiguous (the kernels take any other
// strides), else a contiguous copy.
inline at::Tensor last_dim_contiguous(const at::Tensor &t) {
  return t.size(-1) <= 1 || t.stride(-1) == 1 ? t : t.contiguous();
}

// The tensors a call reads and writes, kept alive for the kernels (copies
// made for layout or dtype live here).
struct Call {
  at::Tensor q, k, v, out, lse;
  at::Tensor cu_seqlens_q, cu_seqlens_k, alibi;
  FwdParams params;
};

inline at::Tensor checked_cu_seqlens(const char *op, const char *name,
                                     const at::Tensor &cu, int64_t rows,
                                     const at::Tensor &q) {
  TORCH_CHECK(cu.dim() == 1 && cu.size(0) >= 1, op, ": ", name,
              " must be 1-D with batch_size + 1 entries, got shape ", cu.sizes());
  TORCH_CHECK(cu.scalar_type() == at::kInt || cu.scalar_type() == at::kLong, op,
              ": ", name, " must be int32 (or int64), got ", cu.scalar_type());
  TORCH_CHECK(cu.device() == q.device(), op, ": ", name, " must be on ",
              q.device(), " like q, got ", cu.device());
  at::Tensor c = cu.to(at::kInt).contiguous();
  // Values are only checked where reading them costs no device sync.
  if (c.device().is_cpu()) {
    const int32_t *p = c.const_data_ptr<int32_t>();
    TORCH_CHECK(p[0] == 0, op, ": ", name, "[0] must be 0, got ", p[0]);
    for (int64_t b = 1; b < c.size(0); ++b) {
      TORCH_CHECK(p[b] >= p[b - 1], op, ": ", name,
                  " must be non-decreasing, got ", p[b - 1], " then ", p[b],
                  " at index ", b);
    }
    TORCH_CHECK(p[c.size(0) - 1] <= rows, op, ": ", name, " ends at ",
                p[c.size(0) - 1], " but the tensor has ", rows, " rows");
  }
  return c;
}

inline void check_qkv(const char *op, const at::Tensor &q, const at::Tensor &k,
                      const at::Tensor &v, int64_t dims, c10::DeviceType device) {
  const char *layout = dims == 4 ? "(batch, seqlen, heads, head_dim)"
                                 : "(total_tokens, heads, head_dim)";
  TORCH_CHECK(q.dim() == dims && k.dim() == dims && v.dim() == dims, op,
              ": q, k and v must be ", dims, "-D ", layout, ", got q ",
              q.sizes(), ", k ", k.sizes(), ", v ", v.sizes());
  TORCH_CHECK(q.device().type() == device, op, ": this is the ",
              c10::DeviceTypeName(device), " implementation, got q on ",
              q.device());
  TORCH_CHECK(k.device() == q.device() && v.device() == q.device(), op,
              ": q, k and v must be on one device, got ", q.device(), ", ",
              k.device(), ", ", v.device());
  TORCH_CHECK(k.scalar_type() == q.scalar_type() &&
                  v.scalar_type() == q.scalar_type(),
              op, ": q, k and v must have one dtype, got ", q.scalar_type(),
              ", ", k.scalar_type(), ", ", v.scalar_type());
  dtype_of(op, q.scalar_type());
  const int64_t d = q.size(-1);
  TORCH_CHECK(supported_head_dim(d), op, ": head_dim ", d,
              " is not supported; supported head dims are 64 and 128");
  TORCH_CHECK(k.size(-1) == d && v.size(-1) == d, op,
              ": q, k and v must share head_dim, got ", d, ", ", k.size(-1),
              ", ", v.size(-1));
  TORCH_CHECK(k.sizes() == v.sizes(), op, ": k and v must have one shape, got ",
              k.sizes(), " and ", v.sizes());
  const int64_t h = q.size(-2), hk = k.size(-2);
  TORCH_CHECK(hk >= 1 && h % hk == 0, op, ": the number of q heads (", h,
              ") must be a multiple of the number of k/v heads (", hk, ")");
}

inline std::vector<int64_t> strides3(const at::Tensor &t) {
  // (batch, row, head) strides of a 4-D tensor, (0, row, head) of a 3-D one.
  if (t.dim() == 4) return {t.stride(0), t.stride(1), t.stride(2)};
  return {0, t.stride(0), t.stride(1)};
}

inline void set_strides(FwdParams &p, const Call &c) {
  auto s = strides3(c.q);
  p.q_batch_stride = s[0], p.q_row_stride = s[1], p.q_head_stride = s[2];
  s = strides3(c.k);
  p.k_batch_stride = s[0], p.k_row_stride = s[1], p.k_head_stride = s[2];
  s = strides3(c.v);
  p.v_batch_stride = s[0], p.v_row_stride = s[1], p.v_head_stride = s[2];
  s = strides3(c.out);
  p.o_batch_stride = s[0], p.o_row_stride = s[1], p.o_head_stride = s[2];
}

// Checks a forward call and allocates out (like q, contiguous) and lse.
// cu_seqlens_q/k given: varlen (3-D q/k/v), else batched (4-D).
inline Call prepare_forward(const char *op, c10::DeviceType device,
                            const at::Tensor &q_in, const at::Tensor &k_in,
                            const at::Tensor &v_in,
                            const std::optional<at::Tensor> &cu_seqlens_q,
                            const std::optional<at::Tensor> &cu_seqlens_k,
                            int64_t max_seqlen_q, int64_t max_seqlen_k,
                            const std::optional<at::Tensor> &alibi_slopes,
                            double softmax_scale, bool causal) {
  const bool varlen = cu_seqlens_q.has_value();
  TORCH_CHECK(varlen == cu_seqlens_k.has_value(), op,
              ": give both cu_seqlens_q and cu_seqlens_k or neither");
  check_qkv(op, q_in, k_in, v_in, varlen ? 3 : 4, device);

  Call c;
  c.q = last_dim_contiguous(q_in);
  c.k = last_dim_contiguous(k_in);
  c.v = last_dim_contiguous(v_in);
  FwdParams &p = c.params;
  p.dtype = dtype_of(op, q_in.scalar_type());
  p.head_dim = static_cast<int32_t>(q_in.size(-1));
  p.heads = static_cast<int32_t>(q_in.size(-2));
  p.heads_k = static_cast<int32_t>(k_in.size(-2));
  p.softmax_scale = static_cast<float>(softmax_scale);
  p.causal = causal;

  if (varlen) {
    c.cu_seqlens_q = checked_cu_seqlens(op, "cu_seqlens_q", *cu_seqlens_q, q_in.size(0), q_in);
    c.cu_seqlens_k = checked_cu_seqlens(op, "cu_seqlens_k", *cu_seqlens_k, k_in.size(0), q_in);
    TORCH_CHECK(c.cu_seqlens_q.size(0) == c.cu_seqlens_k.size(0), op,
                ": cu_seqlens_q and cu_seqlens_k must have the same length, got ",
                c.cu_seqlens_q.size(0), " and ", c.cu_seqlens_k.size(0));
    TORCH_CHECK(max_seqlen_q >= 0 && max_seqlen_k >= 0, op,
                ": max_seqlen_q and max_seqlen_k must be >= 0");
    p.batch = static_cast<int32_t>(c.cu_seqlens_q.size(0) - 1);
    p.seqlen_q = max_seqlen_q;
    p.seqlen_k = max_seqlen_k;
    if (c.cu_seqlens_q.device().is_cpu()) {
      // The kernels trust max_seqlen (GPU grids are sized by it).
      const int32_t *cq = c.cu_seqlens_q.const_data_ptr<int32_t>();
      const int32_t *ck = c.cu_seqlens_k.const_data_ptr<int32_t>();
      for (int64_t b = 0; b < p.batch; ++b) {
        TORCH_CHECK(cq[b + 1] - cq[b] <= max_seqlen_q && ck[b + 1] - ck[b] <= max_seqlen_k,
                    op, ": sequence ", b, " has ", cq[b + 1] - cq[b], " queries and ",
                    ck[b + 1] - ck[b], " keys, more than max_seqlen_q=", max_seqlen_q,
                    " / max_seqlen_k=", max_seqlen_k);
      }
    }
    p.cu_seqlens_q = c.cu_seqlens_q.const_data_ptr<int32_t>();
    p.cu_seqlens_k = c.cu_seqlens_k.const_data_ptr<int32_t>();
    c.lse = at::empty({p.heads, q_in.size(0)}, q_in.options().dtype(at::kFloat));
    p.lse_batch_stride = 0;
    p.lse_head_stride = q_in.size(0);
  } else {
    TORCH_CHECK(k_in.size(0) == q_in.size(0), op,
                ": q and k must have the same batch size, got ", q_in.size(0),
                " and ", k_in.size(0));
    p.batch = static_cast<int32_t>(q_in.size(0));
    p.seqlen_q = q_in.size(1);
    p.seqlen_k = k_in.size(1);
    c.lse = at::empty({p.batch, p.heads, p.seqlen_q}, q_in.options().dtype(at::kFloat));
    p.lse_batch_stride = static_cast<int64_t>(p.heads) * p.seqlen_q;
    p.lse_head_stride = p.seqlen_q;
  }

  if (alibi_slopes.has_value()) {
    const at::Tensor &a = *alibi_slopes;
    TORCH_CHECK(a.scalar_type() == at::kFloat, op,
                ": alibi_slopes must be float32, got ", a.scalar_type());
    TORCH_CHECK(a.device() == q_in.device(), op, ": alibi_slopes must be on ",
                q_in.device(), " like q, got ", a.device());
    const bool per_head = a.dim() == 1 && a.size(0) == p.heads;
    const bool per_batch = a.dim() == 2 && a.size(0) == p.batch && a.size(1) == p.heads;
    TORCH_CHECK(per_head || per_batch, op,
                ": alibi_slopes must have shape (heads,) = (", p.heads,
                ",) or (batch, heads) = (", p.batch, ", ", p.heads, "), got ",
                a.sizes());
    c.alibi = a.contiguous();
    p.alibi_slopes = c.alibi.const_data_ptr<float>();
    p.alibi_batch_stride = per_batch ? p.heads : 0;
  }

  c.out = at::empty(q_in.sizes(), q_in.options().memory_format(at::MemoryFormat::Contiguous));
  set_strides(p, c);
  p.q = c.q.const_data_ptr();
  p.k = c.k.const_data_ptr();
  p.v = c.v.const_data_ptr();
  p.out = c.out.mutable_data_ptr();
  p.lse = c.lse.mutable_data_ptr<float>();
  return c;
}

// The backward: the forward's checks on q, k, v, then dout and out (shape of
// q) and softmax_lse (the forward's layout). Reads everything as fp32
// (contiguous copies where needed) and allocates fp32 dq, dk, dv; the caller
// casts them to the inputs' dtype.
struct BwdCall {
  Call fwd;
  at::Tensor dout, delta, dq, dk, dv;
  BwdParams params;
};

inline BwdCall prepare_backward(const char *op, c10::DeviceType device,
                                const at::Tensor &dout, const at::Tensor &q,
                                const at::Tensor &k, const at::Tensor &v,
                                const at::Tensor &out, const at::Tensor &lse,
                                const std::optional<at::Tensor> &cu_seqlens_q,
                                const std::optional<at::Tensor> &cu_seqlens_k,
                                int64_t max_seqlen_q, int64_t max_seqlen_k,
                                const std::optional<at::Tensor> &alibi_slopes,
                                double softmax_scale, bool causal) {
  TORCH_CHECK(dout.sizes() == q.sizes() && out.sizes() == q.sizes(), op,
              ": dout and out must have the shape of q ", q.sizes(), ", got ",
              dout.sizes(), " and ", out.sizes());
  TORCH_CHECK(dout.device() == q.device() && out.device() == q.device() &&
                  lse.device() == q.device(),
              op, ": dout, out and softmax_lse must be on ", q.device());
  const auto f32 = [](const at::Tensor &t) { return t.to(at::kFloat).contiguous(); };
  BwdCall c;
  // The forward's bookkeeping on fp32 copies: params.fwd then addresses them.
  c.fwd = prepare_forward(op, device, f32(q), f32(k), f32(v), cu_seqlens_q,
                          cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                          alibi_slopes, softmax_scale, causal);
  TORCH_CHECK(lse.scalar_type() == at::kFloat && lse.sizes() == c.fwd.lse.sizes(),
              op, ": softmax_lse must be float32 of shape ", c.fwd.lse.sizes(),
              " (the forward's), got ", lse.scalar_type(), " ", lse.sizes());
  c.fwd.lse = lse.contiguous();
  c.dout = f32(dout);
  // delta = rowsum(dout * out), laid out like lse: (batch, heads, seqlen_q)
  // or (heads, total_q).
  at::Tensor delta = (c.dout * out.to(at::kFloat)).sum(-1);
  c.delta = (q.dim() == 4 ? delta.transpose(1, 2) : delta.transpose(0, 1)).contiguous();
  c.dq = at::empty_like(c.fwd.q);
  c.dk = at::empty_like(c.fwd.k);
  c.dv = at::empty_like(c.fwd.v);

  BwdParams &p = c.params;
  p.fwd = c.fwd.params;
  p.fwd.lse = c.fwd.lse.mutable_data_ptr<float>();
  // dout and out are contiguous like the fp32 q copy, whose strides the
  // out/o_* fields already hold (out was allocated like q).
  p.dout = c.dout.const_data_ptr<float>();
  p.delta = c.delta.const_data_ptr<float>();
  p.dq = c.dq.mutable_data_ptr<float>();
  p.dk = c.dk.mutable_data_ptr<float>();
  p.dv = c.dv.mutable_data_ptr<float>();
  return c;
}

}  // namespace flash_attn
