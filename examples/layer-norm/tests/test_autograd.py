"""Backward ops and autograd: gradcheck in fp64 (the CPU ops support it), and
fp32/bf16/fp16 gradients against PyTorch's autograd of the references."""

import pytest
import torch
import torch.nn.functional as F

from norm_reference import DTYPES, llama_rms_norm, silu_and_mul


def leaf(shape, dtype, seed, scale=1.0, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale + shift).to(dtype).requires_grad_()


# ---- gradcheck (fp64) ----------------------------------------------------------


@pytest.mark.parametrize("n", [1, 7, 33])
@pytest.mark.parametrize("affine", ["weight+bias", "weight", "bias", "none"])
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_gradcheck_layer_norm(ln, n, affine, residual):
    x = leaf((4, n), torch.float64, 0, shift=0.3)
    r = leaf((4, n), torch.float64, 1)
    w = leaf(n, torch.float64, 2, shift=1.0) if "weight" in affine else None
    b = leaf(n, torch.float64, 3) if "bias" in affine else None

    def fn(x, r, w, b):
        if residual:
            y, s = ln.layer_norm(x, w, b, 1e-5, residual=r)
            return y, s
        return ln.layer_norm(x, w, b, 1e-5)

    inputs = (x, r if residual else None, w, b)
    assert torch.autograd.gradcheck(fn, inputs)


@pytest.mark.parametrize("n", [1, 7, 33])
@pytest.mark.parametrize("weight", [True, False], ids=["weight", "no_weight"])
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_gradcheck_rms_norm(ln, n, weight, residual):
    x = leaf((4, n), torch.float64, 0, shift=0.3)
    r = leaf((4, n), torch.float64, 1)
    w = leaf(n, torch.float64, 2, shift=1.0) if weight else None

    def fn(x, r, w):
        return ln.rms_norm(x, w, 1e-5, residual=r) if residual else ln.rms_norm(x, w, 1e-5)

    assert torch.autograd.gradcheck(fn, (x, r if residual else None, w))


def test_gradcheck_multi_dim_and_strided(ln):
    x = leaf((3, 2, 5), torch.float64, 0)
    w = leaf((2, 5), torch.float64, 1, shift=1.0)
    b = leaf((2, 5), torch.float64, 2)
    assert torch.autograd.gradcheck(lambda x, w, b: ln.layer_norm(x, w, b, 1e-5, normalized_shape=(2, 5)), (x, w, b))
    # A transposed input (copied by the op) and a transposed use of the output
    # (a non-contiguous grad_out for the backward).
    xt = leaf((6, 4), torch.float64, 3)
    assert torch.autograd.gradcheck(lambda x: ln.rms_norm(x.t(), None, 1e-5).t() * 2, (xt,))


def test_gradcheck_silu_and_mul(ln):
    x = leaf((3, 2 * 9), torch.float64, 0, scale=3.0)
    assert torch.autograd.gradcheck(ln.silu_and_mul, (x,))


# ---- other dtypes vs PyTorch's autograd ------------------------------------------

GRAD_TOL = {
    torch.float32: dict(rtol=1e-4, atol=1e-4),
    torch.bfloat16: dict(rtol=5e-2, atol=5e-2),
    torch.float16: dict(rtol=1e-2, atol=1e-2),
}


def grads_of(fn, inputs, grad_outputs):
    outs = fn(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    used = [(o, g) for o, g in zip(outs, grad_outputs) if g is not None]
    return torch.autograd.grad([o for o, _ in used], inputs, [g for _, g in used], allow_unused=True)


def relative_close(got, expected, dtype, name):
    """Compare at the scale of the expected gradient (grad_weight sums over
    rows, so its absolute size grows with the row count)."""
    scale = expected.double().abs().max().clamp_min(1.0)
    torch.testing.assert_close(
        (got.double() / scale), (expected.double() / scale), **GRAD_TOL[dtype], msg=lambda m: f"{name}: {m}"
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [7, 129, 1024])
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_layer_norm_grads(ln, dtype, n, residual):
    x = leaf((37, n), dtype, 0, shift=0.5)
    r = leaf((37, n), dtype, 1)
    w = leaf(n, dtype, 2, shift=1.0)
    b = leaf(n, dtype, 3)
    dy = torch.randn(37, n, dtype=torch.float64).to(dtype)
    ds = torch.randn(37, n, dtype=torch.float64).to(dtype) if residual else None

    def ours(x, r, w, b):
        return ln.layer_norm(x, w, b, 1e-5, residual=r) if residual else ln.layer_norm(x, w, b, 1e-5)

    def ref(x, r, w, b):
        # In fp32, from the same 16-bit inputs (eager 16-bit autograd rounds
        # every intermediate and would be the less accurate side).
        s = (x + r) if residual else x
        y = F.layer_norm(s.float(), (n,), w.float(), b.float(), 1e-5)
        return (y, s) if residual else y

    inputs = (x, r, w, b)
    got = grads_of(ours, inputs, (dy, ds))
    expected = grads_of(ref, inputs, (dy.float(), ds))
    for name, g, e in zip(["x", "residual", "weight", "bias"], got, expected):
        if e is None:  # the residual of the plain variant: unused
            assert g is None
            continue
        assert g.dtype == dtype
        relative_close(g, e, dtype, name)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [7, 129, 1024])
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_rms_norm_grads(ln, dtype, n, residual):
    x = leaf((37, n), dtype, 0, shift=0.5)
    r = leaf((37, n), dtype, 1)
    w = leaf(n, dtype, 2, shift=1.0)
    dy = torch.randn(37, n, dtype=torch.float64).to(dtype)
    ds = torch.randn(37, n, dtype=torch.float64).to(dtype) if residual else None

    def ours(x, r, w):
        return ln.rms_norm(x, w, 1e-6, residual=r) if residual else ln.rms_norm(x, w, 1e-6)

    def ref(x, r, w):
        s = (x + r) if residual else x
        y = llama_rms_norm(s.float(), w.float(), 1e-6)
        return (y, s) if residual else y

    inputs = (x, r, w)
    got = grads_of(ours, inputs, (dy, ds))
    expected = grads_of(ref, inputs, (dy.float(), ds))
    for name, g, e in zip(["x", "residual", "weight"], got, expected):
        if e is None:
            assert g is None
            continue
        relative_close(g, e, dtype, name)


def test_grads_only_where_needed(ln):
    """Inputs without requires_grad get no gradient, and the op is not asked
    for grad_weight it does not need."""
    x = leaf((5, 16), torch.float32, 0)
    w = torch.randn(16)  # no grad
    y = ln.layer_norm(x, w, None, 1e-5)
    (gx,) = torch.autograd.grad(y.sum(), (x,))
    assert gx.shape == x.shape and w.grad is None


def test_empty_batch_backward(ln):
    x = torch.empty(0, 8, requires_grad=True)
    w = torch.ones(8, requires_grad=True)
    b = torch.zeros(8, requires_grad=True)
    ln.layer_norm(x, w, b, 1e-5).sum().backward()
    assert x.grad.shape == (0, 8)
    assert torch.equal(w.grad, torch.zeros(8)) and torch.equal(b.grad, torch.zeros(8))
    w2 = torch.ones(8, requires_grad=True)
    ln.rms_norm(torch.empty(0, 8), w2, 1e-6).sum().backward()
    assert torch.equal(w2.grad, torch.zeros(8))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_silu_and_mul_grads(ln, dtype):
    x = leaf((9, 2 * 70), dtype, 0, scale=3.0)
    dy = torch.randn(9, 70).to(dtype)
    (got,) = torch.autograd.grad(ln.silu_and_mul(x), (x,), dy)
    (expected,) = torch.autograd.grad(silu_and_mul(x.float()), (x,), dy.float())
    relative_close(got, expected, dtype, "x")


def test_raw_backward_refuses_bad_arguments(ln):
    x = torch.randn(4, 8)
    rstd = torch.ones(4)
    with pytest.raises(RuntimeError, match="grad_weight needs the weight"):
        ln.ops.rms_norm_bwd(torch.empty_like(x), torch.empty(8), torch.randn(4, 8), None, x, rstd, None)
    with pytest.raises(RuntimeError, match="grad_out must have the input's shape"):
        ln.ops.rms_norm_bwd(torch.empty_like(x), None, torch.randn(4, 9), None, x, rstd, None)
    with pytest.raises(RuntimeError, match="grad_input must have a contiguous last dimension"):
        ln.ops.rms_norm_bwd(torch.empty(8, 4).t(), None, torch.randn(4, 8), None, x, rstd, None)
