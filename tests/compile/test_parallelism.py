"""How many compiles and nvcc threads run at once, derived from cores and memory."""

from __future__ import annotations

import pytest

from kernel_builder.errors import KbuildError
from kernel_builder.compile.parallelism import MEMORY_PER_COMPILE, compile_parallelism

GB = 1 << 30


@pytest.fixture(autouse=True)
def no_overrides(monkeypatch):
    monkeypatch.delenv("MAX_JOBS", raising=False)
    monkeypatch.delenv("NVCC_THREADS", raising=False)


def test_threads_follow_architectures_within_cores():
    assert compile_parallelism(2, cores=16, memory=128 * GB).nvcc_threads == 2
    assert compile_parallelism(12, cores=4, memory=128 * GB).nvcc_threads == 4
    assert compile_parallelism(1, cores=16, memory=128 * GB).nvcc_threads == 1


def test_memory_bounds_jobs_times_threads():
    # 16 cores but room for only 4 compilers: 2 threads each leaves 2 compiles.
    p = compile_parallelism(2, cores=16, memory=4 * MEMORY_PER_COMPILE)
    assert (p.jobs, p.nvcc_threads) == (2, 2)
    assert p.jobs * p.nvcc_threads * MEMORY_PER_COMPILE <= 4 * MEMORY_PER_COMPILE
    # Plenty of memory: one compile per core.
    assert compile_parallelism(2, cores=8, memory=256 * GB).jobs == 8
    # Almost no memory: still one compile, one thread.
    p = compile_parallelism(8, cores=8, memory=GB)
    assert (p.jobs, p.nvcc_threads) == (1, 1)


def test_this_machine_gives_positive_figures():
    p = compile_parallelism(2)
    assert p.jobs >= 1 and p.nvcc_threads >= 1
    assert "nvcc --threads" in p.describe()


def test_explicit_values_and_torch_variables_override(monkeypatch):
    assert compile_parallelism(2, jobs=3, nvcc_threads=5, cores=2, memory=GB) == type(compile_parallelism(1))(3, 5)
    monkeypatch.setenv("MAX_JOBS", "7")
    monkeypatch.setenv("NVCC_THREADS", "1")
    p = compile_parallelism(4, cores=2, memory=GB)
    assert (p.jobs, p.nvcc_threads) == (7, 1)
    assert compile_parallelism(4, jobs=2, cores=2, memory=GB).jobs == 2  # the option beats MAX_JOBS


@pytest.mark.parametrize("value", [0, -1, "many"])
def test_bad_values_are_clear_errors(monkeypatch, value):
    with pytest.raises(KbuildError, match="--max-jobs must be a whole number of at least 1"):
        compile_parallelism(jobs=value)
    monkeypatch.setenv("NVCC_THREADS", str(value))
    with pytest.raises(KbuildError, match="NVCC_THREADS must be a whole number"):
        compile_parallelism()
