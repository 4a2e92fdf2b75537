"""Forward ops of the built kernel against PyTorch references.

This file runs in the current process (on x86-64 CPUs with AVX-512: the
AVX-512 path, with native bf16 rounding where the CPU has AVX512_BF16) and once
more, with test_autograd.py, per other CPU path in child processes (the
switches are read once per process): LAYER_NORM_DISABLE_AVX512_BF16=1
(software bf16 rounding) and LAYER_NORM_DISABLE_AVX512=1 (the portable at::vec
path).
"""

import os
import pathlib
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from norm_reference import CPU_DTYPES, DTYPES, layer_norm_fp, llama_rms_norm, rms_norm_fp, silu_and_mul, ulp

DISABLE_AVX512 = "LAYER_NORM_DISABLE_AVX512"
DISABLE_AVX512_BF16 = "LAYER_NORM_DISABLE_AVX512_BF16"
CHILD_MARK = "LAYER_NORM_TEST_CHILD"

# Hidden sizes around the vector widths (16 fp32 lanes, 32 per unrolled step)
# and real model sizes; 4097 = a real size plus a tail of one.
SIZES = [1, 7, 16, 33, 129, 1024, 4097]
SHAPES = [(1, n) for n in (1, 7, 4097)] + [(5, n) for n in SIZES] + [(2, 3, 40), (300, 257)]


def make(shape, dtype, seed=0, scale=3.0, shift=0.5):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale + shift).to(dtype)


def params(n, dtype, seed=1):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, generator=g) * 0.5 + 1).to(dtype)
    b = torch.randn(n, generator=g).to(dtype)
    return w, b


def tol(dtype, ulps=1):
    """Against an fp64 reference: `ulps` units of the dtype (the kernel rounds
    once from fp32), plus the fp32 arithmetic's own error for fp32/fp64."""
    if dtype == torch.float64:
        return dict(rtol=1e-12, atol=1e-12)
    if dtype == torch.float32:
        return dict(rtol=2e-6, atol=2e-5)
    return dict(rtol=ulps * ulp(dtype), atol=1e-5)


def cpu_flags():
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return None


def env_on(name):
    return os.environ.get(name, "").lower() not in ("", "0", "false", "off", "no")


# ---- which path ------------------------------------------------------------


def test_active_path(ln):
    """avx512_enabled() / avx512_bf16_enabled() follow the CPU and the switches."""
    flags = cpu_flags()
    if flags is None:
        pytest.skip("cannot read CPU flags from /proc/cpuinfo")
    avx512 = {"avx512f", "avx512bw", "avx512vl", "fma"} <= flags and not env_on(DISABLE_AVX512)
    assert ln.avx512_enabled() is avx512
    bf16 = avx512 and "avx512_bf16" in flags and not env_on(DISABLE_AVX512_BF16)
    assert ln.avx512_bf16_enabled() is bf16


# ---- LayerNorm -------------------------------------------------------------


@pytest.mark.parametrize("dtype", CPU_DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_layer_norm(ln, shape, dtype):
    x = make(shape, dtype)
    w, b = params(shape[-1], dtype)
    y = ln.layer_norm(x, w, b, 1e-5)
    assert y.shape == x.shape and y.dtype == dtype
    torch.testing.assert_close(y.double(), layer_norm_fp(x, w, b, 1e-5), **tol(dtype))
    # And the eager op in the same dtype (it rounds the same way, up to fp32 noise).
    torch.testing.assert_close(y, F.layer_norm(x, shape[-1:], w, b, 1e-5), **tol(dtype, ulps=2))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("affine", ["none", "weight", "bias"])
def test_layer_norm_optional_params(ln, dtype, affine):
    x = make((6, 45), dtype)
    w, b = params(45, dtype)
    w = w if affine == "weight" else None
    b = b if affine == "bias" else None
    torch.testing.assert_close(ln.layer_norm(x, w, b, 1e-5).double(), layer_norm_fp(x, w, b, 1e-5), **tol(dtype))


def test_layer_norm_normalized_shape(ln):
    """Several trailing dimensions, as nn.LayerNorm((C, H, W))."""
    x = make((4, 3, 5, 7), torch.float32)
    w, b = params(3 * 5 * 7, torch.float32)
    w, b = w.view(3, 5, 7), b.view(3, 5, 7)
    y = ln.layer_norm(x, w, b, 1e-5, normalized_shape=(3, 5, 7))
    torch.testing.assert_close(y, F.layer_norm(x, (3, 5, 7), w, b, 1e-5), **tol(torch.float32))
    with pytest.raises(ValueError, match="normalized_shape"):
        ln.layer_norm(x, None, None, 1e-5, normalized_shape=(5, 5))


def test_layer_norm_large_mean_is_stable(ln):
    """Two-pass variance: a row with mean 1e4 and std 1 keeps its precision."""
    x = make((8, 1000), torch.float32, scale=1.0, shift=1e4)
    y = ln.layer_norm(x, None, None, 1e-5)
    torch.testing.assert_close(y.double(), layer_norm_fp(x, None, None, 1e-5), rtol=1e-3, atol=1e-3)


def test_layer_norm_stats(ln):
    """The raw op's saved statistics: mean and 1 / sqrt(var + eps) per row."""
    x = make((7, 129), torch.float32)
    y = torch.empty_like(x)
    mean = torch.empty(7)
    rstd = torch.empty(7)
    assert ln.ops.layer_norm_fwd(y, None, mean, rstd, x, None, None, None, 1e-5) is None
    var, mu = torch.var_mean(x.double(), dim=-1, unbiased=False)
    torch.testing.assert_close(mean.double(), mu, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rstd.double(), torch.rsqrt(var + 1e-5), rtol=1e-6, atol=0)


# ---- RMSNorm ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", CPU_DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_rms_norm(ln, shape, dtype):
    x = make(shape, dtype)
    w, _ = params(shape[-1], dtype)
    y = ln.rms_norm(x, w, 1e-6)
    assert y.shape == x.shape and y.dtype == dtype
    if dtype == torch.float64:
        torch.testing.assert_close(y, rms_norm_fp(x, w, 1e-6), **tol(dtype))
        return
    # The LlamaRMSNorm expression rounds the normalized value, then the product:
    # the kernel does the same, so they agree up to the fp32 noise of rstd.
    torch.testing.assert_close(y, llama_rms_norm(x, w, 1e-6), **tol(dtype, ulps=2))
    torch.testing.assert_close(y.double(), rms_norm_fp(x, w, 1e-6), **tol(dtype, ulps=2))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rms_norm_without_weight(ln, dtype):
    x = make((9, 300), dtype)
    torch.testing.assert_close(ln.rms_norm(x, None, 1e-6), llama_rms_norm(x, None, 1e-6), **tol(dtype, ulps=2))


def test_rms_norm_bf16_matches_llama_bitwise_mostly(ln):
    """The double rounding of LlamaRMSNorm is reproduced: bf16 results equal the
    eager expression's except where rstd itself differs in its last bit."""
    x = make((64, 4096), torch.bfloat16)
    w, _ = params(4096, torch.bfloat16)
    y = ln.rms_norm(x, w, 1e-6)
    same = (y == llama_rms_norm(x, w, 1e-6)).float().mean().item()
    assert same > 0.999, same


def test_rms_norm_stats(ln):
    x = make((7, 129), torch.float32)
    y = torch.empty_like(x)
    rstd = torch.empty(7)
    ln.ops.rms_norm_fwd(y, None, rstd, x, None, None, 1e-6)
    expected = torch.rsqrt(x.double().pow(2).mean(-1) + 1e-6)
    torch.testing.assert_close(rstd.double(), expected, rtol=1e-6, atol=0)


# ---- fused residual (prenorm) ------------------------------------------------


@pytest.mark.parametrize("dtype", CPU_DTYPES, ids=str)
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (3, 129), (2, 3, 4097)], ids=str)
def test_fused_residual(ln, op, shape, dtype):
    x = make(shape, dtype, seed=2)
    res = make(shape, dtype, seed=3)
    w, b = params(shape[-1], dtype)
    if op == "layer_norm":
        y, s = ln.layer_norm(x, w, b, 1e-5, residual=res)
        y_alone = ln.layer_norm(x + res, w, b, 1e-5)
    else:
        y, s = ln.rms_norm(x, w, 1e-6, residual=res)
        y_alone = ln.rms_norm(x + res, w, 1e-6)
    # s is x + residual rounded to the dtype, exactly as eager adds them, and
    # y is the norm of that rounded s.
    assert s.dtype == dtype and s.shape == x.shape
    assert torch.equal(s, x + res)
    assert torch.equal(y, y_alone)


def test_fused_residual_shape_mismatch(ln):
    with pytest.raises(ValueError, match="residual must have the input's shape"):
        ln.rms_norm(torch.randn(4, 8), None, 1e-6, residual=torch.randn(4, 9))


# ---- layouts and odd sizes ------------------------------------------------------


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_empty_batch(ln, op):
    fn = ln.layer_norm if op == "layer_norm" else ln.rms_norm
    for shape in [(0, 64), (2, 0, 64)]:
        x = torch.empty(shape)
        assert fn(x, torch.ones(64)).shape == shape
        y, s = fn(x, torch.ones(64), residual=torch.empty(shape))
        assert y.shape == shape and s.shape == shape


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_empty_rows(ln, op):
    """A normalized size of 0 (the ops refuse it) gives an empty result."""
    fn = ln.layer_norm if op == "layer_norm" else ln.rms_norm
    assert fn(torch.empty(3, 0), None).shape == (3, 0)
    with pytest.raises(RuntimeError, match="must not be empty"):
        ln.ops.rms_norm_fwd(torch.empty(3, 0), None, torch.empty(3), torch.empty(3, 0), None, None, 1e-6)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_non_contiguous_inputs(ln, dtype):
    """Transposed, row-strided, expanded and sliced inputs are handled."""
    w, b = params(40, dtype)
    base = make((40, 30), dtype)
    cases = {
        "transposed": base.t(),  # (30, 40), last-dim stride 30: copied
        "strided rows": make((30, 50), dtype)[:, 5:45],  # used in place
        "every other row": make((60, 40), dtype)[::2],  # used in place
        "expanded": make((1, 40), dtype).expand(30, 40),  # row stride 0
        "3-d permuted": make((5, 6, 40), dtype).permute(1, 0, 2),  # rows not evenly strided
    }
    for name, x in cases.items():
        torch.testing.assert_close(
            ln.layer_norm(x, w, b, 1e-5).double(), layer_norm_fp(x, w, b, 1e-5), **tol(dtype), msg=name
        )
        torch.testing.assert_close(ln.rms_norm(x, w, 1e-6), llama_rms_norm(x, w, 1e-6), **tol(dtype, 2), msg=name)
        r = make(x.shape, dtype, seed=9).t().contiguous().t() if x.dim() == 2 else make(x.shape, dtype, seed=9)
        y, s = ln.rms_norm(x, w, 1e-6, residual=r)
        assert torch.equal(s, x + r), name


def test_non_contiguous_weight(ln):
    w_big = torch.randn(2, 64)
    w = w_big[:, 0]  # stride 64
    x = torch.randn(3, 2)
    torch.testing.assert_close(ln.rms_norm(x, w, 1e-6), llama_rms_norm(x, w, 1e-6))


def test_strided_output_rows(ln):
    """The raw op writes rows at the output's stride, nothing in between."""
    x = make((5, 37), torch.float32)
    big = torch.zeros(5, 48)
    out = big[:, :37]
    ln.ops.rms_norm_fwd(out, None, torch.empty(5), x, None, None, 1e-6)
    torch.testing.assert_close(out, llama_rms_norm(x, None, 1e-6))
    assert torch.all(big[:, 37:] == 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_large_output(ln, dtype):
    """Outputs large enough for the huge-page advice and, in fp32, the
    non-temporal stores (64 MiB and more)."""
    x = make((4096, 4096), dtype)
    w, b = params(4096, dtype)
    y = ln.layer_norm(x, w, b, 1e-5)
    rows = [0, 1, 2047, 4095]
    torch.testing.assert_close(y[rows].double(), layer_norm_fp(x[rows], w, b, 1e-5), **tol(dtype))
    y, s = ln.rms_norm(x, w, 1e-6, residual=x)
    torch.testing.assert_close(y[rows], llama_rms_norm(x[rows] + x[rows], w, 1e-6), **tol(dtype, 2))
    assert torch.equal(s, x + x)


def test_nan_stays_in_its_row(ln):
    x = make((3, 50), torch.float32)
    x[1, 7] = float("nan")
    for y in (ln.layer_norm(x, None, None, 1e-5), ln.rms_norm(x, None, 1e-6)):
        assert torch.isnan(y[1]).all()
        assert torch.isfinite(y[0]).all() and torch.isfinite(y[2]).all()


def test_thread_count_does_not_change_the_result(ln):
    x = make((257, 1000), torch.bfloat16)
    w, b = params(1000, torch.bfloat16)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single = (ln.layer_norm(x, w, b, 1e-5), ln.rms_norm(x, w, 1e-6), ln.silu_and_mul(x))
    finally:
        torch.set_num_threads(before)
    multi = (ln.layer_norm(x, w, b, 1e-5), ln.rms_norm(x, w, 1e-6), ln.silu_and_mul(x))
    for a, b_ in zip(single, multi):
        assert torch.equal(a, b_)


# ---- input validation (the raw ops) -------------------------------------------


def fwd_args(rows=4, n=8, dtype=torch.float32):
    x = torch.randn(rows, n, dtype=dtype)
    return dict(out=torch.empty_like(x), mean=torch.empty(rows), rstd=torch.empty(rows), x=x)


def test_refuses_strided_last_dim_output(ln):
    a = fwd_args()
    out = torch.empty(8, 4).t()
    with pytest.raises(RuntimeError, match="out must have a contiguous last dimension"):
        ln.ops.layer_norm_fwd(out, None, a["mean"], a["rstd"], a["x"], None, None, None, 1e-5)


def test_refuses_bad_arguments(ln):
    a = fwd_args()
    x, out, mean, rstd = a["x"], a["out"], a["mean"], a["rstd"]
    fwd = ln.ops.layer_norm_fwd
    with pytest.raises(RuntimeError, match="weight must have 8 elements"):
        fwd(out, None, mean, rstd, x, None, torch.ones(7), None, 1e-5)
    with pytest.raises(RuntimeError, match="weight must have the input's dtype"):
        fwd(out, None, mean, rstd, x, None, torch.ones(8, dtype=torch.bfloat16), None, 1e-5)
    with pytest.raises(RuntimeError, match="rstd must be Float"):
        fwd(out, None, mean, torch.empty(4, dtype=torch.float64), x, None, None, None, 1e-5)
    with pytest.raises(RuntimeError, match="mean must have one value per row"):
        fwd(out, None, torch.empty(3), rstd, x, None, None, None, 1e-5)
    with pytest.raises(RuntimeError, match="residual and residual_out must be given together"):
        fwd(out, None, mean, rstd, x, torch.randn(4, 8), None, None, 1e-5)
    with pytest.raises(RuntimeError, match="out must have the input's shape"):
        fwd(torch.empty(4, 9), None, mean, rstd, x, None, None, None, 1e-5)
    with pytest.raises(RuntimeError, match="unsupported dtype"):
        xi = torch.ones(4, 8, dtype=torch.int32)
        fwd(torch.empty_like(xi), None, mean, rstd, xi, None, None, None, 1e-5)
    with pytest.raises(RuntimeError, match="at least one dimension"):
        fwd(torch.tensor(1.0), None, torch.empty(1), torch.empty(1), torch.tensor(1.0), None, None, None, 1e-5)
    with pytest.raises(RuntimeError, match="memory location"):
        fwd(x, None, mean, rstd, x, None, None, None, 1e-5)  # out aliases input


def test_refuses_overlapping_output(ln):
    out = torch.empty(1, 8).expand(4, 8)
    with pytest.raises(RuntimeError, match="memory location"):
        ln.ops.rms_norm_fwd(out, None, torch.empty(4), torch.randn(4, 8), None, None, 1e-6)


# ---- silu_and_mul ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", CPU_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 2), (1, 14), (3, 34), (5, 32), (4, 66), (10,), (2, 3, 38), (64, 2 * 1000)], ids=str)
def test_silu_and_mul(ln, shape, dtype):
    x = make(shape, dtype, shift=0.0)
    y = ln.silu_and_mul(x)
    assert y.shape == shape[:-1] + (shape[-1] // 2,) and y.dtype == dtype
    ref = silu_and_mul(x.double())
    if dtype == torch.float64:
        torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    else:
        torch.testing.assert_close(y.double(), ref, rtol=max(2 * ulp(dtype), 1e-5), atol=1e-5)


def test_silu_and_mul_out_and_layouts(ln):
    x = make((6, 90), torch.bfloat16, shift=0.0)
    out = torch.full((6, 45), float("nan"), dtype=torch.bfloat16)
    assert ln.silu_and_mul(x, out=out) is out
    torch.testing.assert_close(out, silu_and_mul(x), rtol=2e-2, atol=1e-3)
    strided = make((6, 100), torch.float32, shift=0.0)[:, :90]
    torch.testing.assert_close(ln.silu_and_mul(strided), silu_and_mul(strided), rtol=1e-5, atol=1e-6)
    permuted = make((4, 3, 20), torch.float32, shift=0.0).transpose(0, 1)
    torch.testing.assert_close(ln.silu_and_mul(permuted), silu_and_mul(permuted), rtol=1e-5, atol=1e-6)
    assert ln.silu_and_mul(torch.empty(0, 8)).shape == (0, 4)


def test_silu_and_mul_errors(ln):
    with pytest.raises(RuntimeError, match="must be even"):
        ln.silu_and_mul(torch.randn(4, 7))
    with pytest.raises(RuntimeError, match="out must have shape"):
        ln.silu_and_mul(torch.randn(4, 10), out=torch.empty(4, 6))
    with pytest.raises(ValueError, match="at least one dimension"):
        ln.silu_and_mul(torch.tensor(1.0))


# ---- the other CPU paths ----------------------------------------------------------


@pytest.mark.parametrize("switch", [DISABLE_AVX512_BF16, DISABLE_AVX512])
def test_other_paths_in_child_process(ln, switch):
    """Run this file and the backward tests again with a faster path switched
    off (fp64 gradcheck always runs the portable path: skipped there)."""
    if os.environ.get(CHILD_MARK):
        pytest.skip("this is already a child run")
    if env_on(DISABLE_AVX512) or env_on(switch):
        pytest.skip(f"this process already runs with {switch} or {DISABLE_AVX512}")
    if not ln.avx512_enabled():
        pytest.skip("no AVX-512 path on this CPU: the portable path already ran")
    if switch == DISABLE_AVX512_BF16 and not ln.avx512_bf16_enabled():
        pytest.skip("no AVX512_BF16 on this CPU: the software bf16 rounding already ran")
    env = dict(os.environ, **{switch: "1", CHILD_MARK: "1"})
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-k", "not gradcheck",
         __file__, str(pathlib.Path(__file__).with_name("test_autograd.py"))],
        cwd=pathlib.Path(__file__).parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"{switch}=1 run failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
