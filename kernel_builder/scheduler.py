"""Run a plan's jobs in parallel within the machine's cores and memory.

The machine's compile slots (cores, and free memory at MEMORY_PER_COMPILE each) are shared
out: `concurrent` jobs run at once and each gets an equal share for its own compiles
(Ninja's -j and nvcc's --threads, kernel_builder.parallelism), so jobs x compiles x nvcc
threads stays within memory. `--jobs` sets how many jobs run at once; MAX_JOBS and
NVCC_THREADS (or --max-jobs, --nvcc-threads) still set the compiles within one job.

A failing job does not stop the others, unless fail_fast: then the jobs not yet started
are cancelled and the running ones finish."""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable, Generic, Iterable, TypeVar

from kernel_builder.parallelism import (
    MEMORY_PER_COMPILE,
    Parallelism,
    available_cores,
    available_memory,
    compile_parallelism,
    positive_count,
)

Job = TypeVar("Job")
Result = TypeVar("Result")


@dataclass(frozen=True)
class Slots:
    """How a plan's jobs share the machine."""

    concurrent: int  # jobs at once
    cores: int  # each job's share of the cores
    memory: int | None  # and of the free memory (bytes), None when unknown
    max_jobs: int | None = None  # --max-jobs: compiles within one job, overriding the share
    nvcc_threads: int | None = None

    def for_job(self, architectures: int = 1) -> Parallelism:
        """The compiles one job runs at once, for a job building `architectures` device
        architectures (nvcc compiles that many at once when its share allows)."""
        return compile_parallelism(architectures, self.max_jobs, self.nvcc_threads, cores=self.cores, memory=self.memory)

    def describe(self) -> str:
        return f"{self.concurrent} job(s) at once, {self.cores} core(s) each"


def plan_slots(
    job_count: int,
    jobs: int | None = None,
    max_jobs: int | None = None,
    nvcc_threads: int | None = None,
    cores: int | None = None,
    memory: int | None = None,
) -> Slots:
    """Share `cores` and `memory` (default: this machine's) among `job_count` jobs.
    Without --jobs, as many jobs run at once as there are compile slots (one per core
    that has MEMORY_PER_COMPILE of free memory), never more than there are jobs."""
    cores = cores or available_cores()
    memory = memory if memory is not None else available_memory()
    slots = cores if memory is None else max(1, min(cores, memory // MEMORY_PER_COMPILE))
    concurrent = positive_count(jobs, "--jobs") or max(1, min(job_count, slots))
    return Slots(
        concurrent=concurrent,
        cores=max(1, cores // concurrent),
        memory=None if memory is None else memory // concurrent,
        max_jobs=max_jobs,
        nvcc_threads=nvcc_threads,
    )


class Scheduler(Generic[Job, Result]):
    """Runs `work(job)` for every job, `concurrent` at a time; `cancelled(job)` stands in
    for the result of a job that never started because another failed under fail_fast."""

    def __init__(
        self,
        work: Callable[[Job], Result],
        failed: Callable[[Result], bool],
        cancelled: Callable[[Job], Result],
        concurrent: int,
        fail_fast: bool = False,
    ):
        self.work, self.failed, self.cancelled = work, failed, cancelled
        self.concurrent = max(1, concurrent)
        self.fail_fast = fail_fast
        self._stop = threading.Event()

    def run(self, jobs: Iterable[Job]) -> list[Result]:
        """The results in the order of `jobs`."""
        jobs = list(jobs)
        pending = list(range(len(jobs)))
        results: dict[int, Result] = {}
        running: dict[Future, int] = {}
        with ThreadPoolExecutor(max_workers=self.concurrent, thread_name_prefix="kbuild-job") as pool:
            while running or (pending and not self._stop.is_set()):
                while pending and len(running) < self.concurrent and not self._stop.is_set():
                    index = pending.pop(0)
                    running[pool.submit(self.work, jobs[index])] = index
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    index = running.pop(future)
                    results[index] = future.result()
                    if self.fail_fast and self.failed(results[index]):
                        self._stop.set()
        for index in pending:
            results[index] = self.cancelled(jobs[index])
        return [results[i] for i in range(len(jobs))]
