"""flash_attn_func / flash_attn_varlen_func on CPU against F.scaled_dot_product_attention
in float64 (GQA through enable_gqa, bottom-right causal masks and ALiBi through an
explicit float mask), forward, lse and gradients.

The module runs in-process with the best instruction set this CPU has, and once more per
lower one in a child process (FLASH_ATTN_CPU_ISA=avx512, =portable; test_isa_paths)."""

import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

# fp32 inputs: fp32 arithmetic throughout. bf16 inputs: fp32 accumulation, outputs rounded
# to bf16 (one ulp at 1.0 is 2**-7), and on AVX512_BF16 CPUs P rounded to bf16 before P V
# as flash-attn 2 does on GPUs.
TOL = {torch.float32: dict(atol=2e-5, rtol=2e-5), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}
GRAD_TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.bfloat16: dict(atol=5e-2, rtol=5e-2)}
LSE_TOL = dict(atol=1e-4, rtol=1e-5)
DTYPES = [torch.float32, torch.bfloat16]


def attn_bias(sq, sk, heads, batch, causal, alibi_slopes):
    """The additive float64 mask (batch, heads, sq, sk): ALiBi and the bottom-right causal mask."""
    i = torch.arange(sq)[:, None]
    j = torch.arange(sk)[None, :]
    bias = torch.zeros(batch, heads, sq, sk, dtype=torch.float64)
    if alibi_slopes is not None:
        slopes = alibi_slopes.double().expand(batch, heads)
        bias = bias - slopes[..., None, None] * (i + sk - sq - j).abs()
    if causal:
        bias = bias.masked_fill(j > i + sk - sq, float("-inf"))
    return bias


def reference(q, k, v, causal=False, softmax_scale=None, alibi_slopes=None):
    """out (as q's layout) and lse (batch, heads, sq) in float64 from flash-attn layouts."""
    qd, kd, vd = (t.double().transpose(1, 2) for t in (q, k, v))
    batch, heads, sq, d = qd.shape
    sk = kd.shape[2]
    scale = d**-0.5 if softmax_scale is None else softmax_scale
    bias = attn_bias(sq, sk, heads, batch, causal, alibi_slopes)
    out = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=bias, scale=scale, enable_gqa=True)
    group = heads // kd.shape[1]
    scores = qd @ kd.repeat_interleave(group, dim=1).transpose(-1, -2) * scale + bias
    lse = torch.logsumexp(scores, dim=-1)
    lse = torch.where(torch.isneginf(lse), torch.full_like(lse, math.inf), lse)  # no key seen
    return out.transpose(1, 2), lse


def inputs(batch, sq, sk, heads, heads_k, d, dtype, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    make = lambda s, h: (torch.randn(batch, s, h, d, generator=g) * scale).to(dtype)  # noqa: E731
    return make(sq, heads), make(sk, heads_k), make(sk, heads_k)


SHAPES = [  # batch, seqlen_q, seqlen_k, heads, heads_k, head_dim
    (2, 64, 64, 4, 4, 64),
    (1, 1, 1, 2, 2, 128),  # seqlen 1
    (2, 17, 17, 4, 1, 64),  # MQA, odd length
    (1, 129, 129, 6, 2, 128),  # GQA, odd length
    (2, 100, 300, 2, 2, 64),  # seqlen_q < seqlen_k
    (1, 300, 100, 2, 1, 128),  # seqlen_q > seqlen_k: causal rows that see no key
    (1, 257, 513, 4, 2, 64),  # several query and key blocks
]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_matches_sdpa(flash_attn, shape, causal, dtype):
    batch, sq, sk, h, hk, d = shape
    q, k, v = inputs(batch, sq, sk, h, hk, d, dtype)
    out, lse = flash_attn.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    ref_out, ref_lse = reference(q, k, v, causal)
    assert out.dtype == dtype and out.shape == q.shape and out.is_contiguous()
    assert lse.dtype == torch.float32 and lse.shape == (batch, h, sq)
    torch.testing.assert_close(out.double(), ref_out, **TOL[dtype])
    torch.testing.assert_close(lse.double(), ref_lse, **LSE_TOL)


def sdpa_same_dtype(q, k, v, causal, softmax_scale):
    """SDPA in the inputs' own dtype: what that dtype can be expected to give."""
    sq, sk = q.shape[1], k.shape[1]
    mask = attn_bias(sq, sk, 1, 1, causal, None)[0, 0].to(q.dtype)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=softmax_scale, enable_gqa=True)
    return out.transpose(1, 2)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
def test_softmax_scale_and_large_scores(flash_attn, dtype):
    # Scores up to a few hundred: the running max moves often (online rescaling), and the
    # dtype's own rounding of q.k dominates. The error is held to SDPA's in the same dtype.
    q, k, v = inputs(2, 300, 400, 4, 2, 64, dtype, scale=3.0)
    for scale in (0.05, 1.0):
        out, lse = flash_attn.flash_attn_func(q, k, v, softmax_scale=scale, causal=True, return_lse=True)
        ref_out, ref_lse = reference(q, k, v, causal=True, softmax_scale=scale)
        sdpa_error = (sdpa_same_dtype(q, k, v, True, scale).double() - ref_out).abs().max().item()
        assert (out.double() - ref_out).abs().max().item() <= 2 * sdpa_error + TOL[dtype]["atol"]
        torch.testing.assert_close(lse.double(), ref_lse, atol=2e-3, rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("per_batch", [False, True], ids=["heads", "batch_heads"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_alibi(flash_attn, causal, per_batch, dtype):
    q, k, v = inputs(2, 70, 150, 4, 2, 64, dtype)
    slopes = torch.rand(2, 4) * 0.5 if per_batch else torch.tensor([0.5, 0.25, 0.125, 0.0625])
    out, lse = flash_attn.flash_attn_func(q, k, v, causal=causal, alibi_slopes=slopes, return_lse=True)
    ref_out, ref_lse = reference(q, k, v, causal, alibi_slopes=slopes)
    torch.testing.assert_close(out.double(), ref_out, **TOL[dtype])
    torch.testing.assert_close(lse.double(), ref_lse, **LSE_TOL)


def test_empty_batch_and_empty_sequences(flash_attn):
    q, k, v = inputs(0, 16, 16, 2, 2, 64, torch.float32)
    out, lse = flash_attn.flash_attn_func(q, k, v, causal=True, return_lse=True)
    assert out.shape == (0, 16, 2, 64) and lse.shape == (0, 2, 16)
    # No keys: every query gets 0 and lse = +inf, as flash-attn 2.
    q, k, v = inputs(2, 5, 0, 2, 2, 64, torch.float32)
    out, lse = flash_attn.flash_attn_func(q, k, v, return_lse=True)
    assert torch.equal(out, torch.zeros_like(out)) and torch.isposinf(lse).all()
    # No queries.
    q, k, v = inputs(2, 0, 5, 2, 2, 128, torch.bfloat16)
    out, lse = flash_attn.flash_attn_func(q, k, v, return_lse=True)
    assert out.shape == (2, 0, 2, 128) and lse.shape == (2, 2, 0)


def pack(tensors):
    return torch.cat([t[0] for t in tensors], dim=0)


def cu_seqlens(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_varlen_with_an_empty_sequence(flash_attn, causal, dtype):
    lengths_q = [5, 0, 130, 64, 3]
    lengths_k = [7, 4, 130, 0, 200]  # sequence 1 has no queries, sequence 3 no keys
    seqs = [inputs(1, sq, sk, 4, 2, 64, dtype, seed=i) for i, (sq, sk) in enumerate(zip(lengths_q, lengths_k))]
    slopes = torch.rand(5, 4)
    q, k, v = (pack([s[i] for s in seqs]) for i in range(3))
    out, lse = flash_attn.flash_attn_varlen_func(
        q, k, v, cu_seqlens(lengths_q), cu_seqlens(lengths_k), max(lengths_q), max(lengths_k),
        causal=causal, alibi_slopes=slopes, return_lse=True,
    )
    assert out.shape == q.shape and lse.shape == (4, sum(lengths_q))
    start = 0
    for b, (sq, (qs, ks, vs)) in enumerate(zip(lengths_q, seqs)):
        ref_out, ref_lse = reference(qs, ks, vs, causal, alibi_slopes=slopes[b])
        torch.testing.assert_close(out[start : start + sq].double(), ref_out[0], **TOL[dtype])
        torch.testing.assert_close(lse[:, start : start + sq].double(), ref_lse[0], **LSE_TOL)
        start += sq


def test_varlen_checks_its_offsets(flash_attn):
    q, k, v = (t[0] for t in inputs(1, 10, 10, 2, 2, 64, torch.float32))
    good = torch.tensor([0, 4, 10], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="non-decreasing"):
        flash_attn.flash_attn_varlen_func(q, k, v, torch.tensor([0, 6, 4], dtype=torch.int32), good, 10, 10)
    with pytest.raises(RuntimeError, match="more than max_seqlen_q"):
        flash_attn.flash_attn_varlen_func(q, k, v, good, good, 5, 10)
    # int64 offsets are converted.
    out = flash_attn.flash_attn_varlen_func(q, k, v, good.long(), good.long(), 6, 6)
    torch.testing.assert_close(out, flash_attn.flash_attn_varlen_func(q, k, v, good, good, 6, 6))


def grads(fn, q, k, v, seed=1):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = fn(q, k, v)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    out.backward(g.to(out.dtype))
    return out, q.grad, k.grad, v.grad


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize(
    "shape,causal,alibi",
    [
        ((2, 65, 65, 4, 2, 64), True, False),
        ((1, 40, 150, 2, 1, 128), False, True),
        ((1, 150, 40, 4, 4, 64), True, True),  # rows that see no key
        ((2, 1, 17, 2, 2, 64), False, False),
    ],
    ids=["gqa-causal", "mqa-alibi", "causal-alibi-sq>sk", "seqlen1"],
)
def test_backward_matches_sdpa_gradients(flash_attn, shape, causal, alibi, dtype):
    batch, sq, sk, h, hk, d = shape
    q, k, v = inputs(batch, sq, sk, h, hk, d, dtype)
    slopes = torch.rand(h) * 0.5 if alibi else None
    ours = grads(lambda q, k, v: flash_attn.flash_attn_func(q, k, v, causal=causal, alibi_slopes=slopes), q, k, v)
    ref = grads(lambda q, k, v: reference(q, k, v, causal, alibi_slopes=slopes)[0], q.double(), k.double(), v.double())
    for got, want in zip(ours, ref):
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), want, **GRAD_TOL[dtype])


def test_varlen_backward(flash_attn):
    lengths_q, lengths_k = [5, 0, 70, 33], [9, 3, 70, 12]
    seqs = [inputs(1, sq, sk, 4, 2, 64, torch.float32, seed=i) for i, (sq, sk) in enumerate(zip(lengths_q, lengths_k))]
    q, k, v = (pack([s[i] for s in seqs]) for i in range(3))
    cq, ck = cu_seqlens(lengths_q), cu_seqlens(lengths_k)
    fn = lambda q, k, v: flash_attn.flash_attn_varlen_func(q, k, v, cq, ck, 70, 70, causal=True)  # noqa: E731
    _, dq, dk, dv = grads(fn, q, k, v)
    # The upstream gradient grads() drew for the packed output.
    g = torch.randn(q.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    qs = ks = 0
    for sq, sk in zip(lengths_q, lengths_k):
        rq, rk, rv = (t[s0 : s0 + n].detach().double().unsqueeze(0).requires_grad_()
                      for t, s0, n in ((q, qs, sq), (k, ks, sk), (v, ks, sk)))
        reference(rq, rk, rv, True)[0].backward(g[qs : qs + sq].unsqueeze(0))
        torch.testing.assert_close(dq[qs : qs + sq].double(), rq.grad[0], **GRAD_TOL[torch.float32])
        torch.testing.assert_close(dk[ks : ks + sk].double(), rk.grad[0], **GRAD_TOL[torch.float32])
        torch.testing.assert_close(dv[ks : ks + sk].double(), rv.grad[0], **GRAD_TOL[torch.float32])
        qs, ks = qs + sq, ks + sk


def test_non_contiguous_inputs_are_handled(flash_attn):
    # (batch, heads, seqlen, d) storage seen as (batch, seqlen, heads, d): read in place.
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in inputs(2, 33, 47, 4, 2, 64, torch.float32))
    assert not q.is_contiguous()
    out = flash_attn.flash_attn_func(q, k, v, causal=True)
    torch.testing.assert_close(out.double(), reference(q, k, v, True)[0], **TOL[torch.float32])
    # A strided last dimension is copied first.
    q2, k2, v2 = (torch.stack([t, t], dim=-1)[..., 0] for t in inputs(1, 20, 20, 2, 2, 128, torch.bfloat16))
    assert q2.stride(-1) == 2
    out = flash_attn.flash_attn_func(q2, k2, v2)
    torch.testing.assert_close(out.double(), reference(q2, k2, v2)[0], **TOL[torch.bfloat16])
    # Gradients come back in the inputs' shapes.
    _, dq, dk, dv = grads(lambda q, k, v: flash_attn.flash_attn_func(q, k, v), q, k, v)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape


def test_fp16_is_computed_in_fp32(flash_attn):
    q, k, v = inputs(1, 40, 40, 2, 2, 64, torch.float16)
    out = flash_attn.flash_attn_func(q, k, v, causal=True)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.double(), reference(q, k, v, True)[0], atol=2e-3, rtol=2e-3)


def test_results_do_not_depend_on_the_thread_count(flash_attn):
    q, k, v = inputs(1, 200, 200, 4, 2, 128, torch.bfloat16)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = flash_attn.flash_attn_func(q, k, v, causal=True, return_lse=True)
        torch.set_num_threads(max(2, threads))
        many = flash_attn.flash_attn_func(q, k, v, causal=True, return_lse=True)
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(one, many))


def test_return_values(flash_attn):
    q, k, v = inputs(1, 8, 8, 2, 2, 64, torch.float32)
    out = flash_attn.flash_attn_func(q, k, v)
    assert isinstance(out, torch.Tensor)
    out2, lse, s_dmask = flash_attn.flash_attn_func(q, k, v, return_attn_probs=True)
    assert torch.equal(out, out2) and lse.shape == (1, 2, 8) and s_dmask is None
    assert not lse.requires_grad


def test_errors_are_clear(flash_attn):
    q, k, v = inputs(1, 8, 8, 4, 2, 96, torch.float32)
    with pytest.raises(RuntimeError, match=r"head_dim 96 is not supported; supported head dims are 64 and 128"):
        flash_attn.flash_attn_func(q, k, v)
    q, k, v = inputs(1, 8, 8, 3, 2, 64, torch.float32)
    with pytest.raises(RuntimeError, match=r"multiple of the number of k/v heads"):
        flash_attn.flash_attn_func(q, k, v)
    q, k, v = inputs(1, 8, 8, 2, 2, 64, torch.float32)
    with pytest.raises(ValueError, match="dropout_p=0.1 is not supported"):
        flash_attn.flash_attn_func(q, k, v, dropout_p=0.1)
    with pytest.raises(ValueError, match="window_size"):
        flash_attn.flash_attn_func(q, k, v, window_size=(4, 0))
    with pytest.raises(ValueError, match="softcap"):
        flash_attn.flash_attn_func(q, k, v, softcap=30.0)
    with pytest.raises(RuntimeError, match="unsupported dtype Double"):
        flash_attn.flash_attn_func(q.double(), k.double(), v.double())
    with pytest.raises(RuntimeError, match=r"alibi_slopes must have shape \(heads,\)"):
        flash_attn.flash_attn_func(q, k, v, alibi_slopes=torch.ones(3))
    with pytest.raises(RuntimeError, match="must be 4-D"):
        flash_attn.flash_attn_func(q[0], k[0], v[0])


def test_torch_compile_traces_the_ops(flash_attn):
    q, k, v = (t.requires_grad_() for t in inputs(1, 30, 30, 2, 1, 64, torch.float32))

    def loss(q, k, v):
        return flash_attn.flash_attn_func(q, k, v, causal=True).square().sum()

    compiled = torch.compile(loss, backend="aot_eager", fullgraph=True)
    expected = torch.autograd.grad(loss(q, k, v), (q, k, v))
    got = torch.autograd.grad(compiled(q, k, v), (q, k, v))
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)


@pytest.mark.skipif(os.environ.get("FLASH_ATTN_CPU_ISA") is not None, reason="runs in the parent process only")
@pytest.mark.parametrize("isa", ["avx512", "portable"])
def test_isa_paths(flash_attn, isa):
    """This module again with the instruction set capped at `isa` (where the CPU has it)."""
    if isa == "avx512" and flash_attn.cpu_isa() == "portable":
        pytest.skip("this CPU has no AVX-512")
    env = dict(os.environ, FLASH_ATTN_CPU_ISA=isa, PYTHONDONTWRITEBYTECODE="1")
    selection = "not isa_paths and not torch_compile and not thread_count"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", __file__, "-k", selection],
        capture_output=True, text=True, env=env, cwd=os.path.dirname(__file__),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


def test_active_isa_is_reported(flash_attn):
    cap = os.environ.get("FLASH_ATTN_CPU_ISA")
    assert flash_attn.cpu_isa() in ("avx512_bf16", "avx512", "portable")
    if cap:
        assert flash_attn.cpu_isa() == cap or (cap != "portable" and flash_attn.cpu_isa() == "portable")
