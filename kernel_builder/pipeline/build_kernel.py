"""`kbuild build`: select the variants, ask the runner --runner names for its tasks (one job
per variant; kernel_builder.runners), run them in parallel under one build lock, and report.
The pipeline never knows which runner it drives.
A job whose inputs did not change is up to date and costs no compile."""

from __future__ import annotations

import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable, Iterator

from kernel_builder.assemble.output_cache import output_cache_for
from kernel_builder.assemble.stamp import remove_stale_staging
from kernel_builder.pipeline.options import BuildOptions
from kernel_builder.pipeline.plan import kernel_work_root
from kernel_builder.pipeline.plan_assembly import assemble_plan
from kernel_builder.pipeline.report import BuildReport
from kernel_builder.pipeline.scheduler import Scheduler, plan_slots
from kernel_builder.pipeline.selection import select
from kernel_builder.compile.compiler_cache import CompilerCache
from kernel_builder.compile.parallelism import compile_parallelism
from kernel_builder.compile.tool_processes import ToolProcesses
from kernel_builder.environments.choice import EnvChooser
from kernel_builder.errors import Interrupted
from kernel_builder.file_lock import exclusive_lock
from kernel_builder.kernel.fusion import load_fusions
from kernel_builder.kernel.manifest import Manifest, load_manifest
from kernel_builder.paths import cache_dir, short_key
from kernel_builder.runners import get_runner
from kernel_builder.runners.base import BuildSettings, RunRequest, Task, writing_to
from kernel_builder.runners.progress import Progress
from kernel_builder.runners.result import CANCELLED, JobResult


def build_kernel(
    kernel_dir: Path,
    options: BuildOptions | None = None,
    *,
    chooser: EnvChooser | None = None,
    progress: Progress | None = None,
    on_wait: Callable[[str], None] = lambda message: print(message, file=sys.stderr),
    ops_id: str | None = None,
    say: Callable[[str], None] = lambda message: None,
) -> tuple[Manifest, BuildReport]:
    """Build `kernel_dir` as `options` say (default: BuildOptions(), this machine's variants
    into KERNEL_DIR/build). Selected variants this machine cannot build are skipped with
    the reason; a failing job does not stop the others unless `options.fail_fast`. Every
    new variant is checked before it is installed.

    `chooser` gives the build environments (default: `options.env_chooser(say)`: `say`
    hears of environments being created); `progress` shows the jobs. Another build of the same kernel or into the same output folder runs
    first; `on_wait` says so once (and reports image builds). `ops_id` is not a user's option:
    kbuild dev's builds, never published, fix their op namespace with it (plan_build)."""
    started = time.perf_counter()
    options = options or BuildOptions()
    # MAX_JOBS and NVCC_THREADS, read from the environment, fail here as a bad flag would.
    compile_parallelism(jobs=options.max_jobs, nvcc_threads=options.nvcc_threads)
    manifest = load_manifest(kernel_dir)
    if manifest.framework == "tvm-ffi":  # no torch, no runner: a pipeline of its own
        from kernel_builder.pipeline.build_tvm_ffi import build_tvm_ffi

        out = Path(options.out) if options.out else manifest.root / "build"
        with build_lock(manifest, out, on_wait):
            return manifest, build_tvm_ffi(manifest, options, on_wait)
    runner = get_runner(options.runner)
    request = run_request(manifest, options, chooser or options.env_chooser(say), on_wait, ops_id)
    # A missing tool, or a scheduler that does not answer, fails here (asked once: it is a request).
    found_cache = runner.compiler_cache(request)
    if found_cache and found_cache.dist_problem:
        on_wait(f"warning: {found_cache.dist_problem}: compiling here (--dist-fallback-local)")
    progress = progress or Progress()
    out = request.out
    with build_lock(request.manifest, out, on_wait):
        with writing_to(out):
            remove_stale_staging(out)
        tasks, skips = runner.tasks(request)
        settings = job_settings(options, len(tasks), found_cache, progress)
        for task in tasks:
            progress.add(task.label)

        def work(task: Task) -> JobResult:
            result = task.run(settings)
            progress.finished(task.label, result.status, result.detail if not result.ok else "")
            return result

        def cancelled(task: Task) -> JobResult:
            why = "interrupted" if scheduler.interrupted is not None else "another job failed (--fail-fast)"
            return JobResult(task.label, task.backend, CANCELLED, detail=f"not started: {why}")

        scheduler = Scheduler(
            work, failed=lambda r: not r.ok, cancelled=cancelled, concurrent=settings.slots.concurrent,
            fail_fast=options.fail_fast, on_interrupt=lambda again: settings.tools.stop(force=again),
        )
        with progress:
            results = scheduler.run(tasks)
        if scheduler.interrupted is not None:
            # Staged variants are renamed into place whole, so every previous one is intact.
            count = sum(r.status == CANCELLED for r in results)
            jobs = "job" if count == 1 else "jobs"
            raise Interrupted(f"interrupted: {count} {jobs} cancelled, previous variants kept", scheduler.interrupted)
        results = skips + results
    report = BuildReport(request.manifest.name, out, tuple(results), time.perf_counter() - started,
                         settings.slots.concurrent)
    return request.manifest, report


def run_request(
    manifest: Manifest, options: BuildOptions, chooser: EnvChooser,
    say: Callable[[str], None] = lambda message: None, ops_id: str | None = None,
) -> RunRequest:
    """What a build of `manifest` with `options` asks of its runner: the selected variants
    (none: the runner's default here), the output folder, and how to plan for this machine
    (kernel_builder.pipeline.plan_assembly)."""
    load_fusions(manifest.root)  # a malformed kbuild.toml fails here, before any compile
    inputs = assemble_plan(manifest, options, chooser, ops_id)
    return RunRequest(
        manifest, inputs.out, inputs.requested, inputs.style, options, chooser, inputs.plan,
        lambda: select(manifest, "all"), say,
    )


def job_settings(
    options: BuildOptions, task_count: int, compiler_cache: CompilerCache | None, progress: Progress | None = None
) -> BuildSettings:
    """What every job of a build of `task_count` tasks shares."""
    slots = plan_slots(task_count, options.jobs, options.max_jobs, options.nvcc_threads)
    return BuildSettings(
        slots, compiler_cache, progress or Progress(), import_check=options.import_check, strict_abi=options.strict_abi,
        tools=ToolProcesses(), output_cache=output_cache_for(options.output_cache, options.output_cache_mode),
    )


@contextmanager
def build_lock(manifest: Manifest, out: Path, on_wait: Callable[[str], None]) -> Iterator[None]:
    """Hold what a build writes against other kbuild builds: the kernel's work trees (shared
    by every --out) and the output folder (its variants and staging, whichever kernel).
    Always kernel first, then output, so two builds never wait on each other in a cycle.
    The locks live in kbuild's cache, not in the output, which holds variants only."""
    said = False

    def waiting_for(what: str) -> Callable[[int | None], None]:
        def say(holder: int | None) -> None:
            nonlocal said
            if not said:
                by = f" (pid {holder})" if holder else ""
                on_wait(f"waiting for another kbuild build {what}{by} ...")
                said = True
        return say

    work_root = kernel_work_root(manifest)
    kernel_lock = work_root.with_name(f"{work_root.name}.lock")
    output_lock = cache_dir("locks") / f"out-{short_key(str(out.resolve()))}.lock"
    with ExitStack() as held:
        held.enter_context(exclusive_lock(kernel_lock, on_wait=waiting_for(f"of {manifest.root}"), inherit=True))
        held.enter_context(exclusive_lock(output_lock, on_wait=waiting_for(f"writing to {out}"), inherit=True))
        yield
