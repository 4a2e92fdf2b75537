"""Tests for a built relu kernel (run `kbuild build examples/relu` first)."""

import pathlib

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    not (ROOT / "build").is_dir(),
    reason="no build/ folder: run `kbuild build examples/relu` first",
)


def _load():
    try:
        from kernel_builder.runtime import load_local
    except ImportError:
        load_local = None
    if load_local is not None:
        return load_local(ROOT)
    try:
        from kernels import get_local_kernel
    except ImportError:
        pytest.skip("neither kernel_builder nor kernels is installed")
    return get_local_kernel(pathlib.Path(ROOT), backend="cpu")


@pytest.fixture(scope="module")
def kernel():
    return _load()


DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7,), (64, 129), (4, 1 << 16)])
def test_matches_torch(kernel, dtype, shape):
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype)
    torch.testing.assert_close(kernel.relu(x), torch.relu(x), rtol=0, atol=0)


def test_out_argument(kernel):
    x = torch.randn(100)
    out = torch.full_like(x, 123.0)
    result = kernel.relu(x, out=out)
    assert result is out
    torch.testing.assert_close(out, torch.relu(x), rtol=0, atol=0)


def test_non_contiguous(kernel):
    x = torch.randn(33, 64).t()
    out = torch.empty(33, 64).t()
    kernel.relu(x, out=out)
    torch.testing.assert_close(out, torch.relu(x), rtol=0, atol=0)


def test_nan_propagates(kernel):
    x = torch.tensor([float("nan"), -1.0, 2.0])
    torch.testing.assert_close(kernel.relu(x), torch.relu(x), equal_nan=True)


def test_shape_mismatch_is_an_error(kernel):
    with pytest.raises(RuntimeError, match="shape"):
        kernel.relu(torch.randn(4), out=torch.empty(3))


def test_layer(kernel):
    layer = kernel.layers.ReLU()
    x = torch.randn(8, 16)
    torch.testing.assert_close(layer(x), torch.nn.ReLU()(x), rtol=0, atol=0)
