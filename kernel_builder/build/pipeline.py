"""`kbuild build`: select the variants, plan one job per variant, run the jobs in parallel
on a runner (kernel_builder.runners: local or docker) under one build lock, and report.
A job whose inputs did not change is up to date and costs no compile."""

from __future__ import annotations

import sys
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from kernel_builder.assemble.stamp import remove_stale_staging
from kernel_builder.build.options import BuildOptions
from kernel_builder.build.plan import kernel_work_root, naming_style, plan_build
from kernel_builder.build.report import BuildReport
from kernel_builder.build.scheduler import Scheduler, plan_slots
from kernel_builder.build.selection import resolve, select
from kernel_builder.compile.backends import get_backend
from kernel_builder.compile.backends.common import host_platform
from kernel_builder.compile.compiler_cache import find_compiler_cache
from kernel_builder.compile.tool_processes import ToolProcesses
from kernel_builder.environments.choice import EnvChooser
from kernel_builder.errors import Interrupted, KbuildError
from kernel_builder.file_lock import exclusive_lock
from kernel_builder.kernel.fusion import load_fusions
from kernel_builder.kernel.manifest import Manifest, load_manifest
from kernel_builder.kernel.sources import input_files
from kernel_builder.paths import cache_dir, short_key
from kernel_builder.runners.local import BuildSettings, run_job, writing_to
from kernel_builder.runners.progress import Progress
from kernel_builder.runners.result import CANCELLED, JobResult
from kernel_builder.variants import Style, Variant


@dataclass(frozen=True)
class _Task:
    """One unit for the scheduler: a variant job or a backend's device check."""

    label: str
    backend: str
    run: Callable[[], JobResult]


def build_kernel(
    kernel_dir: Path,
    options: BuildOptions | None = None,
    *,
    chooser: EnvChooser | None = None,
    progress: Progress | None = None,
    on_wait: Callable[[str], None] = lambda message: print(message, file=sys.stderr),
    ops_id: str | None = None,
) -> tuple[Manifest, BuildReport]:
    """Build `kernel_dir` as `options` say (default: BuildOptions(), this machine's variants
    into KERNEL_DIR/build). Selected variants this machine cannot build are skipped with
    the reason; a failing job does not stop the others unless `options.fail_fast`. Every
    new variant is checked before it is installed.

    `chooser` gives the build environments (default: `options.env_chooser()`); `progress`
    shows the jobs. Another build of the same kernel or into the same output folder runs
    first; `on_wait` says so once (and reports image builds). `ops_id` is not a user's option:
    kbuild dev's builds, never published, fix their op namespace with it (plan_build)."""
    started = time.perf_counter()
    options = options or BuildOptions()
    # A missing tool, or a scheduler that does not answer, fails here (asked once: it is a request).
    found_cache = find_compiler_cache(options.compiler_cache)
    if found_cache and found_cache.dist_problem:
        on_wait(f"warning: {found_cache.dist_problem}: compiling here (--dist-fallback-local)")
    manifest = load_manifest(kernel_dir)
    load_fusions(manifest.root)  # a malformed kbuild.toml fails here, before any compile
    selected = resolve(manifest, options.matrix, options.shard)
    chooser = chooser or options.env_chooser()
    progress = progress or Progress()
    out = Path(options.out) if options.out else manifest.root / "build"
    style = naming_style(options.variant_names, options.variants)
    requested = options.variants if selected is None else tuple(v.with_style(style) for v in selected)
    with build_lock(manifest, out, on_wait):
        with writing_to(out):
            remove_stale_staging(out)
        if options.runner == "docker":
            tasks, skips = _docker_tasks(
                manifest, out, requested, options.compiler_cache, lambda: settings, on_wait, style, options.base_image
            )
        else:
            plan = plan_build(
                manifest, chooser, out, requested, skip_unbuildable=selected is not None, style=style,
                cuda_arch=options.cuda_arch, ops_id=ops_id,
            )
            skips = [JobResult(s.variant or f"({s.backend})", s.backend, "skipped", detail=s.reason) for s in plan.skips]
            tasks = [_Task(j.variant.name, j.backend, lambda j=j: run_job(j, chooser, settings)) for j in plan.jobs]
            tasks += [
                _Task(f"({b})", b, lambda b=b, w=w: run_device_check(manifest, b, chooser, w, settings))
                for b, w in plan.device_checks
            ]
        slots = plan_slots(len(tasks), options.jobs, options.max_jobs, options.nvcc_threads)
        settings = BuildSettings(
            slots, found_cache, progress, import_check=options.import_check, strict_abi=options.strict_abi,
            tools=ToolProcesses(),
        )
        for task in tasks:
            progress.add(task.label)

        def work(task: _Task) -> JobResult:
            result = task.run()
            progress.finished(task.label, result.status, result.detail if not result.ok else "")
            return result

        def cancelled(task: _Task) -> JobResult:
            why = "interrupted" if scheduler.interrupted is not None else "another job failed (--fail-fast)"
            return JobResult(task.label, task.backend, CANCELLED, detail=f"not started: {why}")

        scheduler = Scheduler(
            work, failed=lambda r: not r.ok, cancelled=cancelled, concurrent=slots.concurrent,
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
    report = BuildReport(manifest.name, out, tuple(results), time.perf_counter() - started, slots.concurrent)
    return manifest, report


def _docker_tasks(
    manifest: Manifest,
    out: Path,
    requested: tuple[str | Variant, ...],
    compiler_cache: bool | None,
    settings: Callable[[], BuildSettings],
    say: Callable[[str], None],
    style: Style = Style.LEGACY,
    base_image: str | None = None,
) -> tuple[list[_Task], list[JobResult]]:
    """One container job per requested variant (default: every variant of the matrix the
    kernel admits on this machine's platform); variants without a build image are skipped."""
    from kernel_builder.runners.docker_images import MANYLINUX_GLIBC, build_images, glibc_policy, image_for, image_glibc
    from kernel_builder.runners.docker import build_in_container, default_compiler_cache_dir
    from kernel_builder.runners.docker_engine import docker_client

    # plan_build does this for local jobs: a file outside the repo fails before any image or compile.
    input_files(manifest)
    variants = [v if isinstance(v, Variant) else Variant.parse(v) for v in requested]
    if not requested:
        here = "-".join(host_platform())
        variants = [v.with_style(style) for v in select(manifest, "all") if v.platform in (here, None)]
    skips, buildable = [], []
    for variant in variants:
        try:
            image_for(variant, base_image=base_image)
            buildable.append(variant)
        except KbuildError as e:
            skips.append(JobResult(variant.name, variant.backend, "skipped", detail=e.message))
    if not buildable:
        return [], skips
    client = docker_client()
    images, _ = build_images(buildable, client, base_image=base_image, say=say)  # present images are kept
    for built in images:
        glibc = image_glibc(client, built.image.tag)
        if glibc > MANYLINUX_GLIBC:
            say(f"{built.image.build_args['BASE_IMAGE']} has glibc {glibc[0]}.{glibc[1]}: its builds can meet "
                f"{glibc_policy(glibc)}, not manylinux_2_28 (`kbuild check` says which each meets)")
    cache_folder = default_compiler_cache_dir(compiler_cache)

    def job(variant: Variant) -> JobResult:
        current = settings()
        return build_in_container(
            variant, manifest.root, out, client, compiler_cache_dir=cache_folder, parallelism=current.slots.for_job(),
            base_image=base_image,
            on_step=lambda step, log: current.progress.step(variant.name, step, log),
        )

    return [_Task(v.name, v.backend, lambda v=v: job(v)) for v in buildable], skips


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


def run_device_check(
    manifest: Manifest, backend: str, chooser: EnvChooser, work_dir: Path, settings: BuildSettings
) -> JobResult:
    """Compile a backend's device code without claiming a variant (ROCm without ROCm torch)."""
    start = time.perf_counter()
    log = work_dir / "build.log"
    settings.progress.step(f"({backend})", "compile", log)
    try:
        check = get_backend(backend).device_check(manifest, chooser.primary, work_dir)
    except KbuildError as e:
        return JobResult(f"({backend})", backend, "failed", time.perf_counter() - start, e.message, str(log))
    status = "checked" if check.checked else "skipped"
    return JobResult(f"({backend})", backend, status, time.perf_counter() - start, check.summary, str(log))
