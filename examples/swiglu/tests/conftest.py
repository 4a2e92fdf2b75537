"""Fixtures for the swiglu tests.

The tests run against an already built kernel: ``kbuild build examples/swiglu``
writes ``build/<variant>/`` next to build.toml, and the ``swiglu`` fixture
imports the variant for this system from there.
"""

import os
import pathlib

import pytest
import torch

KERNEL_ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_swiglu(root: pathlib.Path = KERNEL_ROOT):
    """Import the built swiglu kernel under ``root`` (the folder with build.toml)."""
    try:
        from kernel_builder.runtime import load_local
    except ImportError:
        load_local = None
    if load_local is not None:
        return load_local(root)

    import kernels

    return kernels.get_local_kernel(pathlib.Path(root), backend="cpu")


@pytest.fixture(scope="session")
def kernel_root() -> pathlib.Path:
    return KERNEL_ROOT


@pytest.fixture(scope="session")
def swiglu(kernel_root):
    if not (kernel_root / "build").is_dir():
        pytest.skip("no build/ folder: run `kbuild build examples/swiglu` first")
    return load_swiglu(kernel_root)


@pytest.fixture(scope="session", autouse=True)
def test_device():
    """KERNEL_TEST_DEVICE=cuda (or another torch device) runs the tests with their
    tensors there: it becomes torch's default device (benchmarks/gpu/run.sh uses it)."""
    device = os.environ.get("KERNEL_TEST_DEVICE", "cpu")
    torch.set_default_device(device)
    yield device
    torch.set_default_device(None)
