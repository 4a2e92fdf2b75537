"""Gradients through the package's functions (torch.autograd.Function over the
kernel's backward ops).

The ops take fp32, bf16 and fp16 only, so gradcheck cannot run in fp64: the
gradients are compared with autograd through the fp64 eager composite (the
exact gradient of the same inputs) within fp32 tolerances, and gradcheck runs
in fp32 with a finite-difference step and tolerances sized for fp32, which
still checks that the backward is the derivative of the forward as computed.
"""

import pytest
import torch
from swiglu_reference import ACTIVATIONS, DTYPES, kernel_function, make_input, reference, reference_grad

TOL = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.bfloat16: dict(rtol=2**-7, atol=1e-5),
    torch.float16: dict(rtol=2**-10, atol=1e-5),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_gradient_matches_fp64_autograd(swiglu, name, dtype):
    x = make_input((3, 5, 2 * 33), dtype).requires_grad_()
    out = kernel_function(swiglu, name)(x)
    assert out.grad_fn is not None
    grad_out = make_input(out.shape, dtype, seed=1, scale=1.0)
    out.backward(grad_out)
    assert x.grad.dtype == dtype and x.grad.shape == x.shape
    torch.testing.assert_close(x.grad.double(), reference_grad(name, x, grad_out), **TOL[dtype])


@pytest.mark.filterwarnings("ignore:Input #0 requires gradient and is not a double precision")
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_gradcheck_fp32(swiglu, name):
    # Gates within a few units of 0, where every activation bends; the step
    # and tolerances are those of a central difference in fp32.
    x = make_input((2, 2 * 7), torch.float32, seed=3, scale=1.5).requires_grad_()
    assert torch.autograd.gradcheck(
        kernel_function(swiglu, name), (x,), eps=1e-3, atol=2e-3, rtol=2e-3, fast_mode=False
    )


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_gradient_of_a_sum_and_of_strided_views(swiglu, name):
    """sum().backward() passes an expanded (stride 0) grad_out; the input here
    is a column slice of a wider tensor, whose gradient lands in the slice."""
    base = make_input((4, 2 * 24 + 6), torch.float32).requires_grad_()
    x = base[:, 3 : 3 + 2 * 24]
    kernel_function(swiglu, name)(x).sum().backward()
    expected = torch.zeros(4, 2 * 24 + 6, dtype=torch.float64)
    expected[:, 3 : 3 + 2 * 24] = reference_grad(name, x, torch.ones(4, 24))
    torch.testing.assert_close(base.grad.double(), expected, **TOL[torch.float32])


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_gradient_flows_to_earlier_layers(swiglu, name):
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 2 * 16)
    x = torch.randn(5, 8)
    kernel_function(swiglu, name)(linear(x)).pow(2).sum().backward()
    kernel_grad = linear.weight.grad.clone()
    linear.zero_grad()
    reference(name, linear(x)).pow(2).sum().backward()
    torch.testing.assert_close(kernel_grad, linear.weight.grad, rtol=1e-4, atol=1e-5)


def test_no_graph_without_grad(swiglu):
    x = torch.randn(3, 8, requires_grad=True)
    with torch.no_grad():
        assert swiglu.silu_and_mul(x).grad_fn is None
    assert swiglu.silu_and_mul(torch.randn(3, 8)).grad_fn is None


def test_out_argument_refused_while_recording(swiglu):
    x = torch.randn(3, 8, requires_grad=True)
    with pytest.raises(RuntimeError, match="out= does not support automatic differentiation"):
        swiglu.gelu_and_mul(x, out=torch.empty(3, 4))
    with torch.no_grad():
        out = torch.empty(3, 4)
        assert swiglu.gelu_and_mul(x, out=out) is out


def test_double_backward_is_refused(swiglu):
    x = torch.randn(3, 8, requires_grad=True)
    (grad,) = torch.autograd.grad(swiglu.silu_and_mul(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable|does not require grad"):
        grad.sum().backward()
