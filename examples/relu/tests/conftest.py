"""Fixtures for the relu tests."""

import os

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def test_device():
    """KERNEL_TEST_DEVICE=cuda (or another torch device) runs the tests with their
    tensors there: it becomes torch's default device (benchmarks/gpu/run.sh uses it)."""
    device = os.environ.get("KERNEL_TEST_DEVICE", "cpu")
    torch.set_default_device(device)
    yield device
    torch.set_default_device(None)
