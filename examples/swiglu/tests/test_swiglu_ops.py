"""Op-level tests of the built swiglu kernel against a PyTorch reference.

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
import torch.nn.functional as F

DISABLE_VAR = "SWIGLU_DISABLE_AVX512"

DTYPES = [torch.float32, torch.bfloat16, torch.float16]

# Against the fp32 reference on the same (rounded) inputs: the kernel computes
# in fp32 and rounds once, so 16-bit results are within one ulp.
TOL_FP32_REF = {
    torch.float32: dict(rtol=1e-5, atol=1e-6),
    torch.bfloat16: dict(rtol=2**-7, atol=1e-6),
    torch.float16: dict(rtol=2**-10, atol=1e-5),
}
# Against the reference computed in the input dtype, which rounds twice (after
# silu and after the product).
TOL_SAME_DTYPE_REF = {
    torch.float32: dict(rtol=1e-5, atol=1e-6),
    torch.bfloat16: dict(rtol=2e-2, atol=1e-4),
    torch.float16: dict(rtol=3e-3, atol=1e-4),
}

SHAPES = [
    (1, 2),  # d = 1
    (1, 2 * 7),  # one row, d below any vector width
    (3, 2 * 17),  # d not a multiple of the vector width
    (5, 2 * 16),  # exactly one AVX-512 vector
    (4, 2 * 33),  # two vectors plus a tail of one
    (2 * 5,),  # 1-D input
    (2, 3, 2 * 19),  # 3-D input
    (2, 2, 3, 2 * 40),  # 4-D input
    (1, 2 * 11008),  # a LLaMA-sized row
    (300, 2 * 257),  # enough rows for several threads
]


def reference(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def make_input(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 3).to(dtype)


def check(out, x):
    dtype = x.dtype
    torch.testing.assert_close(
        out.float(), reference(x.float()), **TOL_FP32_REF[dtype], msg=lambda m: f"vs fp32 reference: {m}"
    )
    torch.testing.assert_close(
        out, reference(x), **TOL_SAME_DTYPE_REF[dtype], msg=lambda m: f"vs {dtype} reference: {m}"
    )


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


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_reference(swiglu, shape, dtype):
    x = make_input(shape, dtype)
    out = swiglu.silu_and_mul(x)
    assert out.shape == shape[:-1] + (shape[-1] // 2,)
    assert out.dtype == dtype
    check(out, x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_out_argument(swiglu, dtype):
    x = make_input((6, 2 * 45), dtype)
    out = torch.full((6, 45), float("nan"), dtype=dtype)
    result = swiglu.silu_and_mul(x, out=out)
    assert result is out
    check(out, x)


def test_raw_op(swiglu):
    x = make_input((4, 2 * 21), torch.float32)
    out = torch.empty(4, 21)
    assert swiglu.ops.silu_and_mul(out, x) is None
    check(out, x)


def test_empty(swiglu):
    x = torch.empty(0, 8)
    assert swiglu.silu_and_mul(x).shape == (0, 4)
    assert swiglu.silu_and_mul(torch.empty(3, 0)).shape == (3, 0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_rows(swiglu, dtype):
    """Rows with a stride larger than 2 * d, in and out, are used in place."""
    d = 37
    big = make_input((5, 2 * d + 9), dtype)
    x = big[:, : 2 * d]
    out_big = torch.zeros(5, d + 3, dtype=dtype)
    out = out_big[:, :d]
    swiglu.silu_and_mul(x, out=out)
    check(out, x)
    assert torch.all(out_big[:, d:] == 0), "wrote outside the out view"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_non_collapsible_layouts(swiglu, dtype):
    """Leading dims that do not merge into one row stride (transposed batch)."""
    d = 29
    x = make_input((4, 3, 2 * d), dtype).transpose(0, 1)  # (3, 4, 2d)
    out = torch.empty(4, 3, d, dtype=dtype).transpose(0, 1)  # (3, 4, d)
    swiglu.silu_and_mul(x, out=out)
    check(out, x)


def test_broadcast_rows(swiglu):
    """A stride-0 (expanded) input is fine: only out must not overlap itself."""
    x = make_input((1, 2 * 40), torch.float32).expand(6, 2 * 40)
    check(swiglu.silu_and_mul(x), x)


def test_special_values(swiglu):
    vals = [-1e4, -100.0, -88.0, -50.0, -1e-30, -0.0, 0.0, 1e-30, 50.0, 88.0, 100.0, 1e4]
    vals += [float("inf"), float("-inf"), float("nan"), 3.0, -3.0]
    gate = torch.tensor(vals)
    x = torch.cat([gate, torch.full_like(gate, 2.0)]).unsqueeze(0)
    out = swiglu.silu_and_mul(x)
    # The kernel never overflows an intermediate: silu(-100) * 2 is about
    # -7.4e-42 (a subnormal) where the reference's exp(100) overflows and
    # gives -0.0, hence the tiny atol.
    torch.testing.assert_close(out, reference(x), rtol=1e-6, atol=1e-30, equal_nan=True)
    assert torch.isnan(out[0, vals.index(float("-inf"))])  # -inf * sigmoid(-inf) = -inf * 0
    assert out[0, vals.index(float("inf"))] == float("inf")


def test_thread_count_does_not_change_result(swiglu):
    x = make_input((512, 2 * 300), torch.bfloat16)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single = swiglu.silu_and_mul(x)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(single, swiglu.silu_and_mul(x))


# ---- input validation ------------------------------------------------------


def test_odd_last_dim(swiglu):
    with pytest.raises(RuntimeError, match="must be even"):
        swiglu.silu_and_mul(torch.randn(4, 7))


def test_zero_dim_input(swiglu):
    with pytest.raises(RuntimeError, match="at least one dimension"):
        swiglu.silu_and_mul(torch.tensor(1.0))


@pytest.mark.parametrize("bad_shape", [(4, 6), (4, 4), (2, 5), (4, 1, 5)], ids=str)
def test_wrong_out_shape(swiglu, bad_shape):
    with pytest.raises(RuntimeError, match="out must have shape"):
        swiglu.silu_and_mul(torch.randn(4, 10), out=torch.empty(bad_shape))


def test_dtype_mismatch(swiglu):
    with pytest.raises(RuntimeError, match="same dtype"):
        swiglu.silu_and_mul(torch.randn(4, 10), out=torch.empty(4, 5, dtype=torch.bfloat16))


def test_unsupported_dtype(swiglu):
    with pytest.raises(RuntimeError, match="unsupported dtype"):
        swiglu.silu_and_mul(torch.randn(4, 10, dtype=torch.float64))


def test_non_contiguous_last_dim(swiglu):
    x = torch.randn(10, 4).t()  # (4, 10), last-dim stride 4
    with pytest.raises(RuntimeError, match="last dimension of input must be contiguous"):
        swiglu.silu_and_mul(x)
    out = torch.empty(5, 4).t()
    with pytest.raises(RuntimeError, match="last dimension of out must be contiguous"):
        swiglu.silu_and_mul(torch.randn(4, 10), out=out)


def test_out_overlapping_input(swiglu):
    # ATen's overlap check (at::assert_no_overlap) decides for contiguous
    # tensors; it does not analyse arbitrary strided views.
    x = torch.randn(10)
    with pytest.raises(RuntimeError, match="memory location"):
        swiglu.ops.silu_and_mul(x[:5], x)


def test_out_overlapping_itself(swiglu):
    out = torch.empty(1, 5).expand(4, 5)
    with pytest.raises(RuntimeError, match="memory location"):
        swiglu.ops.silu_and_mul(out, torch.randn(4, 10))


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
