"""Run a plan's jobs in parallel within the machine's cores and memory.

`concurrent` jobs run at once (up to two per core, as free memory allows at
MEMORY_PER_COMPILE per compile). Each job gets an equal share of the free memory for its
own compiles (Ninja's -j and nvcc's --threads, kernel_builder.compile.parallelism), so jobs x
compiles x nvcc threads stays within memory; the cores are not divided, so a job left
running alone still uses them all. `--jobs` sets how many jobs run at once; MAX_JOBS and
NVCC_THREADS (or --max-jobs, --nvcc-threads) still set the compiles within one job.

A failing job does not stop the others, unless fail_fast: then the jobs not yet started
are cancelled and the running ones finish."""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Callable, Generic, Iterable, TypeVar

from kernel_builder.compile.parallelism import (
    MEMORY_PER_COMPILE,
    Slots,
    available_cores,
    available_memory,
    positive_count,
)

# Jobs at once per core when memory allows (plan_slots).
JOBS_PER_CORE = 2

Job = TypeVar("Job")
Result = TypeVar("Result")


def plan_slots(
    job_count: int,
    jobs: int | None = None,
    max_jobs: int | None = None,
    nvcc_threads: int | None = None,
    cores: int | None = None,
    memory: int | None = None,
) -> Slots:
    """Share `cores` and `memory` (default: this machine's) among `job_count` jobs.

    Without --jobs, up to JOBS_PER_CORE jobs per core run at once, as memory allows (one
    compile of MEMORY_PER_COMPILE each), never more than there are jobs. More jobs than
    cores, because a job spends much of its time on one core or none (CMake's configure,
    linking, the import check, one large translation unit while Ninja's other slot idles):
    another job's compiles fill those gaps."""
    cores = cores or available_cores()
    memory = memory if memory is not None else available_memory()
    limit = cores * JOBS_PER_CORE
    if memory is not None:
        limit = max(1, min(limit, memory // MEMORY_PER_COMPILE))
    concurrent = positive_count(jobs, "--jobs") or max(1, min(job_count, limit))
    return Slots(
        concurrent=concurrent,
        # Every job may use every core (the kernel schedules them; a job running alone at
        # the end then still uses them all); memory is what must not be overcommitted.
        cores=cores,
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
