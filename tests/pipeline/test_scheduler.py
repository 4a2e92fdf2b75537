"""The scheduler: how jobs share cores and memory, parallel runs, failures and
--fail-fast; and the progress views' pieces."""

from __future__ import annotations

import io
import signal
import threading
import time

import pytest
from rich.console import Console

from kernel_builder.errors import KbuildError
from kernel_builder.runners.progress import LineProgress, LiveProgress, activity
from kernel_builder.pipeline.report import BuildReport
from kernel_builder.formatting import human_size
from kernel_builder.runners.result import JobResult
from kernel_builder.compile.compiler_cache import CacheStats
from kernel_builder.pipeline.scheduler import Scheduler, plan_slots

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


@pytest.fixture
def sigint_as_on_a_terminal():
    """Python's own SIGINT handler, even where the suite runs in the background (`cmd &` in a
    script starts it with SIGINT ignored, which the scheduler rightly leaves alone)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_an_interrupt_cancels_pending_jobs_and_stops_the_running_ones(sigint_as_on_a_terminal):
    stopping, calls = threading.Event(), []
    both_started = threading.Barrier(2, timeout=10)

    def work(job):
        both_started.wait()
        if job == 0:
            signal.raise_signal(signal.SIGINT)  # Ctrl-C, as the main thread waits for the jobs
        assert stopping.wait(10)  # until the scheduler stops the running jobs
        return f"stopped {job}"

    def on_interrupt(again):
        calls.append(again)
        stopping.set()

    scheduler = Scheduler(work, failed=lambda r: False, cancelled=lambda job: f"cancelled {job}", concurrent=2,
                          on_interrupt=on_interrupt)
    assert scheduler.run(range(4)) == ["stopped 0", "stopped 1", "cancelled 2", "cancelled 3"]
    assert scheduler.interrupted == signal.SIGINT and calls == [False]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Python's again


def test_activity_shows_progress_not_the_command_line(tmp_path):
    log = tmp_path / "build.log"
    log.write_text("$ /venv/bin/cmake -G Ninja -S /w -B /w/build -DCMAKE_BUILD_TYPE=Release\n")
    assert activity("configure", log) == "configuring"
    with open(log, "a") as f:
        f.write("-- The CXX compiler identification is GNU 12.2.0\n-- Detecting CXX compiler ABI info\n")
    assert activity("configure", log) == "configuring: Detecting CXX compiler ABI info"
    log.write_text("CCACHE_DIR=/c NVCC_APPEND_FLAGS=--threads 2 $ /venv/bin/cmake --build /w/build --parallel 2\n")
    assert activity("compile", log) == "compiling"
    with open(log, "a") as f:
        f.write("[1/12] Building CXX object CMakeFiles/_k.dir/src/torch_binding.cpp.o\n"
                "[3/12] Building CUDA object CMakeFiles/_k.dir/src/kernel.cu.o\n"
                "/src/kernel.cu(12): warning #177-D: variable \"x\" was declared but never referenced\n" * 400)
    assert activity("compile", log) == "[3/12] compiled kernel.cu"  # below hundreds of warning lines
    with open(log, "a") as f:
        f.write("[12/12] Linking CXX shared module _k_cuda_1a2b3c4.abi3.so\n")
    assert activity("compile", log) == "[12/12] linked _k_cuda_1a2b3c4.abi3.so"
    assert activity("environment", None) == "creating build environment"
    assert activity("check", log) == "checking the variant"
    container = tmp_path / "container.log"
    container.write_text("Step 3/5 : RUN kbuild build\n" + "x" * 200 + "\n")
    assert activity("container", container).endswith("...") and len(activity("container", container)) <= 90
    assert activity("container", tmp_path / "missing.log") == "starting the build container"


def test_live_table_keeps_variant_names_whole_at_any_width(tmp_path):
    log = tmp_path / "build.log"
    log.write_text("[3/12] Building CXX object CMakeFiles/_k.dir/src/add.cpp.o\n")
    names = ["torch214-cxx11-cu130-x86_64-linux", "torch-2.13-cxx11-cpu-cpython-3.9-abi3-x86_64-linux"]
    for width in (200, 100, 60, 40):
        out = io.StringIO()
        progress = LiveProgress(Console(file=out, width=width, highlight=False))
        for name in names:
            progress.step(name, "compile", log)
        Console(file=out, width=width).print(progress._table())
        lines = out.getvalue().splitlines()
        assert max(len(line) for line in lines) <= width
        shown = []  # each row's variant cell, its folded lines joined again
        for line in lines[1:]:
            mark, cell = line[:3].strip(), line[3:].split("  ")[0].strip()
            if mark:
                shown.append(cell)
            else:
                shown[-1] += cell
        assert shown == names, (width, lines)
        assert ("[3/12] compiled add.cpp" in out.getvalue()) == (width >= 100)


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


def test_report_counts_the_variants_from_the_output_cache(tmp_path):
    results = (JobResult("a", "cpu", "up-to-date", 0.2, detail="from the output cache"), JobResult("b", "cpu", "up-to-date", 0.1))
    line = BuildReport("k", tmp_path, results, 0.3, 2).summary_line()
    assert line == "k: 2 up-to-date in 0.3 s (2 at once); 1 from the output cache"
