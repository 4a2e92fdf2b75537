"""Run a plan's jobs in parallel within the machine's cores and memory.

`concurrent` jobs run at once (up to two per core, as free memory allows at
MEMORY_PER_COMPILE per compile). Each job gets an equal share of the free memory for its
own compiles (Ninja's -j and nvcc's --threads, kernel_builder.compile.parallelism), so jobs x
compiles x nvcc threads stays within memory; the cores are not divided, so a job left
running alone still uses them all. `--jobs` sets how many jobs run at once; MAX_JOBS and
NVCC_THREADS (or --max-jobs, --nvcc-threads) still set the compiles within one job.

A failing job does not stop the others, unless fail_fast: then the jobs not yet started
are cancelled and the running ones finish. An interrupt (Ctrl-C, SIGTERM) cancels the jobs
not yet started and asks the running ones to stop (`on_interrupt`); `run` returns once
they have, with `interrupted` set to the signal."""

from __future__ import annotations

import signal
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Callable, Generic, Iterable, Iterator, TypeVar

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
    for the result of a job that never started (another failed under fail_fast, or an
    interrupt). On an interrupt, `on_interrupt(again)` stops the running jobs (`again`: a
    further interrupt came while they were stopping)."""

    def __init__(
        self,
        work: Callable[[Job], Result],
        failed: Callable[[Result], bool],
        cancelled: Callable[[Job], Result],
        concurrent: int,
        fail_fast: bool = False,
        on_interrupt: Callable[[bool], None] = lambda again: None,
    ):
        self.work, self.failed, self.cancelled = work, failed, cancelled
        self.concurrent = max(1, concurrent)
        self.fail_fast = fail_fast
        self.on_interrupt = on_interrupt
        self.interrupted: int | None = None  # the signal that stopped the run
        self._stop = threading.Event()

    def run(self, jobs: Iterable[Job]) -> list[Result]:
        """The results in the order of `jobs`."""
        jobs = list(jobs)
        pending = list(range(len(jobs)))
        results: dict[int, Result] = {}
        running: dict[Future, int] = {}
        with _caught_signals() as caught, ThreadPoolExecutor(self.concurrent, thread_name_prefix="kbuild-job") as pool:
            while not caught and (running or (pending and not self._stop.is_set())):
                while pending and len(running) < self.concurrent and not self._stop.is_set():
                    index = pending.pop(0)
                    running[pool.submit(self.work, jobs[index])] = index
                self._collect(running, results)
            if caught:
                self.interrupted = caught[0]
                self._stop_running(running, results, caught)
        return [results[i] if i in results else self.cancelled(jobs[i]) for i in range(len(jobs))]

    def _collect(self, running: dict[Future, int], results: dict[int, Result]) -> None:
        # A short wait: a caught signal is seen within _POLL_SECONDS.
        done, _ = wait(running, timeout=_POLL_SECONDS, return_when=FIRST_COMPLETED)
        for future in done:
            index = running.pop(future)
            results[index] = future.result()
            if self.fail_fast and self.failed(results[index]):
                self._stop.set()

    def _stop_running(self, running: dict[Future, int], results: dict[int, Result], caught: list[int]) -> None:
        """After an interrupt: stop the running jobs and wait for them (each further
        signal stops them harder)."""
        self.on_interrupt(False)
        seen = len(caught)
        while running:
            self._collect(running, results)
            if len(caught) > seen:
                seen = len(caught)
                self.on_interrupt(True)


_POLL_SECONDS = 0.2


@contextmanager
def _caught_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM, recorded (in the list yielded) instead of raising in whatever the
    main thread is doing: an exception raised inside a lock's wait can break the thread
    pool's bookkeeping. Only the main thread can catch signals; a signal that was ignored
    (a background job's SIGINT) stays ignored."""
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    previous = {}
    for number in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(number) is not signal.SIG_IGN:
            previous[number] = signal.signal(number, lambda signum, frame: caught.append(signum))
    try:
        yield caught
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
