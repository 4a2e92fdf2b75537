"""The scheduler: how jobs share cores and memory, parallel runs, failures and
--fail-fast; and the progress views' pieces."""

from __future__ import annotations

import io
import threading
import time

import pytest
from rich.console import Console

from kernel_builder.errors import KbuildError
from kernel_builder.runners.progress import LineProgress, last_line
from kernel_builder.build.report import BuildReport
from kernel_builder.formatting import human_size
from kernel_builder.runners.result import JobResult
from kernel_builder.compile.compiler_cache import CacheStats
from kernel_builder.build.scheduler import Scheduler, plan_slots

GB = 1 << 30


@pytest.fixture(autouse=True)
def _no_overrides(monkeypatch):
    monkeypatch.delenv("MAX_JOBS", raising=False)
    monkeypatch.delenv("NVCC_THREADS", raising=False)


def test_jobs_share_the_cores_and_memory():
    # 2 cores, plenty of memory: up to 2 jobs per core at once, each may use both cores.
    slots = plan_slots(3, cores=2, memory=64 * GB)
    assert (slots.concurrent, slots.cores) == (3, 2)
    assert slots.for_job().jobs == 2
    assert plan_slots(9, cores=2, memory=64 * GB).concurrent == 4
    # Memory binds first: 5 GB free holds two compiles, whatever the cores.
    assert plan_slots(9, cores=8, memory=5 * GB).concurrent == 2
    # 16 cores but 8 GB free: 4 compile slots of 2 GB, so 4 jobs at once with 2 GB each,
    # and nvcc compiles one architecture at a time within that share.
    slots = plan_slots(10, cores=16, memory=8 * GB)
    assert (slots.concurrent, slots.memory) == (4, 2 * GB)
    assert slots.for_job().jobs * slots.concurrent * 2 * GB <= 8 * GB
    assert (slots.for_job(architectures=3).jobs, slots.for_job(architectures=3).nvcc_threads) == (1, 1)
    # One job gets the whole machine: Ninja and nvcc use it.
    one = plan_slots(1, cores=16, memory=64 * GB)
    assert one.concurrent == 1 and one.for_job(architectures=4).nvcc_threads == 4
    assert one.for_job(architectures=4).jobs * one.for_job(architectures=4).nvcc_threads * 2 * GB <= 64 * GB


def test_jobs_option_overrides_the_limit_and_max_jobs_the_compiles(monkeypatch):
    slots = plan_slots(8, jobs=3, cores=2, memory=64 * GB)
    assert slots.concurrent == 3 and slots.for_job().jobs == 2
    assert plan_slots(8, jobs=1, max_jobs=6, cores=2, memory=64 * GB).for_job().jobs == 6
    monkeypatch.setenv("MAX_JOBS", "5")
    assert plan_slots(2, cores=2, memory=64 * GB).for_job().jobs == 5
    with pytest.raises(KbuildError, match="--jobs must be a whole number of at least 1"):
        plan_slots(2, jobs=0)


def _scheduler(work, concurrent, fail_fast=False):
    return Scheduler(work, failed=lambda r: r == "failed", cancelled=lambda job: f"cancelled {job}",
                     concurrent=concurrent, fail_fast=fail_fast)


def test_jobs_run_at_once_up_to_the_limit_and_results_keep_their_order():
    running, peak, lock = [0], [0], threading.Lock()
    both_started = threading.Barrier(2, timeout=10)

    def work(job):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        if job < 2:
            both_started.wait()  # only passes if jobs 0 and 1 run at the same time
        time.sleep(0.02 * (4 - job))
        with lock:
            running[0] -= 1
        return f"done {job}"

    assert _scheduler(work, concurrent=2).run(range(4)) == [f"done {i}" for i in range(4)]
    assert peak[0] == 2


def test_a_failure_does_not_stop_the_others_unless_fail_fast():
    started = []

    def work(job):
        started.append(job)
        return "failed" if job == 0 else f"done {job}"

    assert _scheduler(work, concurrent=1).run(range(3)) == ["failed", "done 1", "done 2"]
    started.clear()
    assert _scheduler(work, concurrent=1, fail_fast=True).run(range(3)) == ["failed", "cancelled 1", "cancelled 2"]
    assert started == [0]


def test_last_line_is_the_compilers_latest(tmp_path):
    log = tmp_path / "build.log"
    log.write_text("[1/3] Building CXX object a.o\n[2/3] Building CUDA object " + "k" * 200 + ".o\n\n")
    line = last_line(log)
    assert line.startswith("[2/3] Building CUDA object") and line.endswith("...") and len(line) <= 90
    assert last_line(tmp_path / "missing.log") == "" and last_line(None) == ""


def test_line_progress_prints_each_step_for_a_ci_log():
    out = io.StringIO()
    progress = LineProgress(Console(file=out, width=200, highlight=False))
    progress.step("torch214-cxx11-cpu-x86_64-linux", "compile")
    progress.finished("torch214-cxx11-cpu-x86_64-linux", "failed", "compile failed: add.cpp:3: error")
    text = out.getvalue()
    assert "torch214-cxx11-cpu-x86_64-linux compile" in text
    assert "torch214-cxx11-cpu-x86_64-linux failed: compile failed: add.cpp:3: error" in text


def test_report_totals_and_json(tmp_path):
    results = (
        JobResult("a", "cpu", "built", 2.0, compiler_cache=CacheStats("ccache", 3, 1), size=2048),
        JobResult("b", "cuda", "built", 3.0, compiler_cache=CacheStats("ccache", 1, 3)),
        JobResult("c", "cpu", "failed", 1.0, detail="compile failed"),
        JobResult("(metal)", "metal", "skipped", detail="xcrun not found"),
    )
    report = BuildReport("k", tmp_path, results, 4.5, 2)
    assert not report.ok
    assert report.summary_line() == "k: 2 built, 1 skipped, 1 failed in 4.5 s (2 at once); ccache 4/8 compiles from cache (50%)"
    data = report.to_json()
    assert data["counts"]["built"] == 2 and data["compiler_cache"] == {"tool": "ccache", "hits": 4, "compiles": 8, "hit_rate": 0.5}
    assert [j["variant"] for j in data["jobs"]] == ["a", "b", "c", "(metal)"] and data["jobs"][0]["size"] == 2048
    assert human_size(2048) == "2.0 KB" and human_size(512) == "512 B"
