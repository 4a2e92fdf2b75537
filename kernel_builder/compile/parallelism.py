"""How many compilers run at once: parallel compiles (Ninja's -j) and nvcc's --threads.

A CUDA translation unit that includes torch can take a few GB while nvcc compiles it,
once per architecture with --threads, so jobs x threads must fit in memory as well as
in the cores. `--max-jobs`/`--nvcc-threads` (or torch's MAX_JOBS/NVCC_THREADS variables)
override the derived figures."""

from __future__ import annotations

import os
from dataclasses import dataclass

from kernel_builder.settings import positive_count, read_environment

# Peak memory of one compiler process on a torch translation unit (measured here: g++
# about 1 GB, nvcc's per-architecture backend about 1.5 GB; with headroom).
MEMORY_PER_COMPILE = 2 << 30


@dataclass(frozen=True)
class Parallelism:
    jobs: int  # compiles at once
    nvcc_threads: int  # architectures nvcc compiles at once within one compile

    def describe(self) -> str:
        return f"{self.jobs} parallel compile(s), nvcc --threads {self.nvcc_threads}"


def available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def available_memory() -> int | None:
    """Bytes the system can give without swapping (MemAvailable), None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def compile_parallelism(
    architectures: int = 1,
    jobs: int | None = None,
    nvcc_threads: int | None = None,
    cores: int | None = None,
    memory: int | None = None,
) -> Parallelism:
    """Derive the figures from cores and memory; explicit values (or MAX_JOBS and
    NVCC_THREADS in the environment) win."""
    cores = cores or available_cores()
    memory = memory if memory is not None else available_memory()
    slots = cores if memory is None else max(1, min(cores, memory // MEMORY_PER_COMPILE))
    environment = read_environment()
    threads = positive_count(nvcc_threads, "--nvcc-threads") or environment.nvcc_threads
    if threads is None:
        threads = max(1, min(architectures, slots))
    wanted_jobs = positive_count(jobs, "--max-jobs") or environment.max_jobs
    if wanted_jobs is None:
        # Each compile may run `threads` backends at once; keep the total within memory,
        # and allow one compile per core so host-only sources overlap the device ones.
        by_memory = slots if memory is None else max(1, memory // (MEMORY_PER_COMPILE * threads))
        wanted_jobs = max(1, min(cores, by_memory))
    return Parallelism(wanted_jobs, threads)


@dataclass(frozen=True)
class Slots:
    """How a plan's jobs share the machine."""

    concurrent: int  # jobs at once
    cores: int  # the cores each job's compiles may use
    memory: int | None  # and of the free memory (bytes), None when unknown
    max_jobs: int | None = None  # --max-jobs: compiles within one job, overriding the share
    nvcc_threads: int | None = None

    def for_job(self, architectures: int = 1) -> Parallelism:
        """The compiles one job runs at once, for a job building `architectures` device
        architectures (nvcc compiles that many at once when its share allows)."""
        return compile_parallelism(architectures, self.max_jobs, self.nvcc_threads, cores=self.cores, memory=self.memory)

    def describe(self) -> str:
        return f"{self.concurrent} job(s) at once on {self.cores} core(s)"
