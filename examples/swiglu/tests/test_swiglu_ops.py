"""Op-level tests of the built swiglu kernel, forward and backward, against
PyTorch references.

The tests in this file run in the current process (AVX-512 path on CPUs that
have it) and once more in a child process with SWIGLU_DISABLE_AVX512=1, which
forces the portable path (the switch is read once per process, so a child
process is the reliable way to flip it).
"""

import os
import pathlib
import subprocess
import sys

import pytest
import torch
from swiglu_reference import (
    ACTIVATIONS,
    DTYPES,
    backward_op,
    forward_op,
    kernel_function,
    make_input,
    reference,
    reference_grad,
)

DISABLE_VAR = "SWIGLU_DISABLE_AVX512"

# Against the fp64 result of the same (rounded) inputs: the kernel computes in
# fp32 and rounds once, so 16-bit results are within one ulp. The fp32 atol
# covers the erf approximation of the exact GELU (absolute error <= 1.5e-7
# in erf, times |g * u|, up to ~50 here) and, in the backward, sums that
# cancel (act'(g) crosses zero).
TOL_EXACT = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.bfloat16: dict(rtol=2**-7, atol=1e-5),
    torch.float16: dict(rtol=2**-10, atol=1e-5),
}
# Against the eager composite in the input dtype, which rounds more than once
# (after the activation and after the product; in the backward, every step).
TOL_EAGER = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
    torch.float16: dict(rtol=3e-3, atol=3e-3),
}

SHAPES = [
    (1, 2),  # d = 1
    (1, 2 * 7),  # one row, d below any vector width
    (3, 2 * 129),  # d = 129: vectors plus a tail of one
    (2, 2 * 4097),  # d = 4097
    (5, 2 * 16),  # exactly one AVX-512 vector
    (2 * 5,),  # 1-D input
    (2, 3, 2 * 19),  # 3-D input
    (2, 2, 3, 2 * 40),  # 4-D input
    (1, 2 * 11008),  # a LLaMA-sized row (split into column blocks across threads)
    (300, 2 * 257),  # enough rows for several threads
]
EMPTY_SHAPES = [(0, 8), (3, 0), (0, 0), (2, 0, 6)]


def check_forward(out, x, name):
    dtype = x.dtype
    torch.testing.assert_close(
        out.double(), reference(name, x.double()), **TOL_EXACT[dtype], msg=lambda m: f"vs fp64: {m}"
    )
    torch.testing.assert_close(out, reference(name, x), **TOL_EAGER[dtype], msg=lambda m: f"vs eager {dtype}: {m}")


def check_backward(grad_input, x, grad_out, name):
    dtype = x.dtype
    torch.testing.assert_close(
        grad_input.double(), reference_grad(name, x, grad_out), **TOL_EXACT[dtype], msg=lambda m: f"vs fp64: {m}"
    )
    torch.testing.assert_close(
        grad_input,
        reference_grad(name, x, grad_out, dtype=dtype),
        **TOL_EAGER[dtype],
        msg=lambda m: f"vs eager {dtype} autograd: {m}",
    )


def run_backward(swiglu, name, x, grad_out, grad_input=None):
    if grad_input is None:
        grad_input = torch.empty_like(x)
    assert backward_op(swiglu, name)(grad_input, grad_out, x) is None
    return grad_input


def cpu_flags():
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return None


def test_active_path(swiglu):
    """avx512_enabled() reflects the CPU and the environment switch."""
    if os.environ.get(DISABLE_VAR, "") not in ("", "0"):
        assert swiglu.avx512_enabled() is False
        return
    flags = cpu_flags()
    if flags is None:
        pytest.skip("cannot read CPU flags from /proc/cpuinfo")
    has_avx512 = {"avx512f", "avx512bw", "avx512vl", "fma"} <= flags
    assert swiglu.avx512_enabled() is has_avx512


# ---- values ------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_forward(swiglu, name, dtype, shape):
    x = make_input(shape, dtype)
    out = kernel_function(swiglu, name)(x)
    assert out.shape == shape[:-1] + (shape[-1] // 2,) and out.dtype == dtype
    check_forward(out, x, name)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_backward(swiglu, name, dtype, shape):
    x = make_input(shape, dtype)
    grad_out = make_input(shape[:-1] + (shape[-1] // 2,), dtype, seed=1, scale=1.0)
    check_backward(run_backward(swiglu, name, x, grad_out), x, grad_out, name)


@pytest.mark.parametrize("shape", EMPTY_SHAPES, ids=str)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_empty(swiglu, name, shape):
    x = torch.empty(shape)
    out = kernel_function(swiglu, name)(x)
    assert out.shape == shape[:-1] + (shape[-1] // 2,)
    assert run_backward(swiglu, name, x, torch.empty(out.shape)).shape == shape


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_gelu_and_mul_approximate_argument(swiglu, name):
    if name == "silu":
        with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh'"):
            swiglu.gelu_and_mul(torch.randn(2, 4), approximate="erf")
        return
    x = make_input((4, 2 * 33), torch.float32)
    approximate = "tanh" if name == "gelu_tanh" else "none"
    torch.testing.assert_close(swiglu.gelu_and_mul(x, approximate=approximate), kernel_function(swiglu, name)(x))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_out_argument(swiglu, name, dtype):
    x = make_input((6, 2 * 45), dtype)
    out = torch.full((6, 45), float("nan"), dtype=dtype)
    result = kernel_function(swiglu, name)(x, out=out)
    assert result is out
    check_forward(out, x, name)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_raw_forward_op(swiglu, name):
    x = make_input((4, 2 * 21), torch.float32)
    out = torch.empty(4, 21)
    assert forward_op(swiglu, name)(out, x) is None
    check_forward(out, x, name)


# GELU's tanh approximation needs g^3, which overflows fp32 beyond ~7e12 and
# makes the derivative inf * 0 = NaN (in PyTorch's formula too), hence no
# 1e30 here; the forward handles it.
SPECIAL = [-1e4, -100.0, -88.0, -50.0, -10.0, -1e-30, -0.0, 0.0, 1e-30, 10.0, 50.0, 88.0, 100.0, 1e4, 3.0, -3.0]


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_special_values_forward(swiglu, name):
    vals = SPECIAL + [1e30, -1e30, float("inf"), float("-inf"), float("nan")]
    gate = torch.tensor(vals)
    x = torch.cat([gate, torch.full_like(gate, 2.0)]).unsqueeze(0)
    out = kernel_function(swiglu, name)(x)
    # The kernel never overflows an intermediate: silu(-100) * 2 is about
    # -7.4e-42 (a subnormal) where the eager exp(100) overflows and gives
    # -0.0. The exact GELU of a very negative gate differs from the reference
    # by the erf approximation (absolute, relative to the output scale).
    # Infinite gates are checked on their own: PyTorch's vectorized GELU
    # gives NaN for +inf (its scalar path gives inf).
    atol = 1e-30 if name == "silu" else 1e-6
    finite = slice(0, len(vals) - 3)
    torch.testing.assert_close(out[:, finite], reference(name, x)[:, finite], rtol=1e-6, atol=atol)
    assert out[0, vals.index(float("inf"))] == float("inf")  # inf * 1 * 2
    assert torch.isnan(out[0, vals.index(float("-inf"))])  # -inf * 0 * 2
    assert torch.isnan(out[0, -1])


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_special_values_backward(swiglu, name):
    gate = torch.tensor(SPECIAL)
    x = torch.cat([gate, torch.full_like(gate, 2.0)]).unsqueeze(0)
    grad_out = torch.full((1, len(SPECIAL)), 0.5)
    grad_input = run_backward(swiglu, name, x, grad_out)
    assert torch.isfinite(grad_input).all()
    torch.testing.assert_close(grad_input.double(), reference_grad(name, x, grad_out), rtol=1e-5, atol=1e-6)


def test_thread_count_does_not_change_result(swiglu):
    """Rows split across threads, and one long row split into column blocks."""
    before = torch.get_num_threads()
    for shape in [(512, 2 * 300), (1, 2 * 20000)]:
        x = make_input(shape, torch.bfloat16)
        grad_out = make_input(shape[:-1] + (shape[-1] // 2,), torch.bfloat16, seed=1)
        try:
            torch.set_num_threads(1)
            single = swiglu.gelu_and_mul(x), run_backward(swiglu, "silu", x, grad_out)
        finally:
            torch.set_num_threads(before)
        assert torch.equal(single[0], swiglu.gelu_and_mul(x))
        assert torch.equal(single[1], run_backward(swiglu, "silu", x, grad_out))


def test_large_results_on_huge_pages(swiglu):
    """Results of 32 MiB and more get their own 2 MiB-aligned mapping (advised as
    transparent huge pages); smaller ones come from torch's allocator. Either
    way they are ordinary, resizable CPU tensors."""
    small = swiglu.ops.new_output([4, 1000], torch.bfloat16)
    assert small.shape == (4, 1000) and small.dtype == torch.bfloat16 and small.is_contiguous()
    x = make_input((1024, 2 * 8192), torch.float32, scale=1.0)  # a 32 MiB result
    out = swiglu.silu_and_mul(x)
    if os.environ.get("SWIGLU_DISABLE_HUGE_PAGES", "") in ("", "0"):
        assert out.data_ptr() % (2 << 20) == 0
    torch.testing.assert_close(out, reference("silu", x), **TOL_EAGER[torch.float32])
    before = out[-1].clone()
    out.resize_(1100, 8192)  # the storage grows through the same allocator
    assert torch.equal(out[1023], before)


# ---- layouts: any layout works; rows with one stride are used in place ---------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_strided_rows(swiglu, name, dtype):
    """Rows with a stride larger than the row, in and out, are used in place."""
    d = 37
    big = make_input((5, 2 * d + 9), dtype)
    x = big[:, : 2 * d]
    out_big = torch.zeros(5, d + 3, dtype=dtype)
    out = out_big[:, :d]
    kernel_function(swiglu, name)(x, out=out)
    check_forward(out, x, name)
    assert torch.all(out_big[:, d:] == 0), "wrote outside the out view"

    grad_big = torch.zeros(5, 2 * d + 4, dtype=dtype)
    grad_input = grad_big[:, : 2 * d]
    grad_out = make_input((5, d + 7), dtype, seed=1)[:, :d]
    run_backward(swiglu, name, x, grad_out, grad_input)
    check_backward(grad_input, x, grad_out, name)
    assert torch.all(grad_big[:, 2 * d :] == 0), "wrote outside the grad_input view"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_non_collapsible_layouts(swiglu, name, dtype):
    """Leading dims that do not merge into one row stride (a transposed batch):
    inputs are copied, outputs written through a temporary."""
    d = 29
    x = make_input((4, 3, 2 * d), dtype).transpose(0, 1)  # (3, 4, 2d)
    out = torch.empty(4, 3, d, dtype=dtype).transpose(0, 1)  # (3, 4, d)
    kernel_function(swiglu, name)(x, out=out)
    check_forward(out, x, name)
    grad_out = make_input((4, 3, d), dtype, seed=1).transpose(0, 1)
    grad_input = torch.empty(4, 3, 2 * d, dtype=dtype).transpose(0, 1)
    run_backward(swiglu, name, x, grad_out, grad_input)
    check_backward(grad_input, x, grad_out, name)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_non_contiguous_last_dim(swiglu, name):
    """A strided last dimension is copied, in and out."""
    d = 10
    x = make_input((2 * d, 4), torch.float32).t()  # (4, 2d), last-dim stride 4
    out = torch.empty(d, 4).t()
    kernel_function(swiglu, name)(x, out=out)
    check_forward(out, x, name)
    grad_out = make_input((d, 4), torch.float32, seed=1).t()
    grad_input = torch.empty(2 * d, 4).t()
    run_backward(swiglu, name, x, grad_out, grad_input)
    check_backward(grad_input, x, grad_out, name)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_broadcast_inputs(swiglu, name):
    """Stride-0 (expanded) inputs are fine: only outputs must not overlap themselves."""
    x = make_input((1, 2 * 40), torch.float32).expand(6, 2 * 40)
    check_forward(kernel_function(swiglu, name)(x), x, name)
    grad_out = torch.ones(1, 1).expand(6, 40)  # what sum().backward() passes
    check_backward(run_backward(swiglu, name, x, grad_out), x, grad_out, name)


# ---- input validation ------------------------------------------------------


def test_odd_last_dim(swiglu):
    with pytest.raises(RuntimeError, match="silu_and_mul: the last dimension of input must be even"):
        swiglu.silu_and_mul(torch.randn(4, 7))
    with pytest.raises(RuntimeError, match="gelu_and_mul_backward: the last dimension of input must be even"):
        swiglu.ops.gelu_and_mul_backward(torch.empty(4, 7), torch.empty(4, 3), torch.randn(4, 7))


def test_zero_dim_input(swiglu):
    with pytest.raises(RuntimeError, match="at least one dimension"):
        swiglu.gelu_tanh_and_mul(torch.tensor(1.0))


@pytest.mark.parametrize("bad_shape", [(4, 6), (4, 4), (2, 5), (4, 1, 5)], ids=str)
def test_wrong_out_shape(swiglu, bad_shape):
    with pytest.raises(RuntimeError, match="out must have shape"):
        swiglu.silu_and_mul(torch.randn(4, 10), out=torch.empty(bad_shape))


def test_wrong_backward_shapes(swiglu):
    x = torch.randn(4, 10)
    with pytest.raises(RuntimeError, match="grad_out must have shape"):
        swiglu.ops.silu_and_mul_backward(torch.empty(4, 10), torch.empty(4, 10), x)
    with pytest.raises(RuntimeError, match="grad_input must have shape"):
        swiglu.ops.silu_and_mul_backward(torch.empty(4, 5), torch.empty(4, 5), x)


def test_dtype_mismatch(swiglu):
    with pytest.raises(RuntimeError, match="same dtype"):
        swiglu.silu_and_mul(torch.randn(4, 10), out=torch.empty(4, 5, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="grad_out and input must have the same dtype"):
        swiglu.ops.gelu_and_mul_backward(torch.empty(4, 10), torch.empty(4, 5, dtype=torch.half), torch.randn(4, 10))


def test_unsupported_dtype(swiglu):
    with pytest.raises(RuntimeError, match=r"unsupported dtype Double \(expected float32, bfloat16 or float16\)"):
        swiglu.gelu_and_mul(torch.randn(4, 10, dtype=torch.float64))


def test_out_overlapping_input(swiglu):
    # ATen's overlap check (at::assert_no_overlap) decides for contiguous
    # tensors; it does not analyse arbitrary strided views.
    x = torch.randn(10)
    with pytest.raises(RuntimeError, match="memory location"):
        swiglu.ops.silu_and_mul(x[:5], x)
    with pytest.raises(RuntimeError, match="memory location"):
        swiglu.ops.silu_and_mul_backward(x, torch.randn(5), x)


def test_out_overlapping_itself(swiglu):
    out = torch.empty(1, 5).expand(4, 5)
    with pytest.raises(RuntimeError, match="memory location"):
        swiglu.ops.gelu_and_mul(out, torch.randn(4, 10))


# ---- the portable path -----------------------------------------------------


@pytest.mark.skipif(
    os.environ.get(DISABLE_VAR, "") not in ("", "0"),
    reason=f"{DISABLE_VAR} is already set: this process runs the portable path",
)
def test_portable_path_in_child_process(swiglu):
    """Run this whole file again with the AVX-512 path switched off."""
    env = dict(os.environ, **{DISABLE_VAR: "1"})
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
        cwd=pathlib.Path(__file__).parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"portable-path run failed:\n{proc.stdout}\n{proc.stderr}"
    assert " passed" in proc.stdout
