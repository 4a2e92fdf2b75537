"""`kbuild build`: run every job of a plan, in parallel, skipping those whose inputs did
not change.

Each job: hash its inputs; if the existing variant folder carries the same hash and its
digests still hold, it is up to date. Otherwise generate the CMake project, build with
Ninja, stage the variant folder, check it (kernel_builder.checks) and only then move it
into place: a variant that fails its checks never replaces the previous one."""

from __future__ import annotations

import json
import shutil
import sys
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from kernel_builder.backends import get_backend
from kernel_builder.backends.common import host_platform
from kernel_builder.cache import cache_dir, short_key
from kernel_builder.checks import FAILED as CHECK_FAILED
from kernel_builder.checks import check_variant
from kernel_builder.cmake import build_project, render_project
from kernel_builder.compiler_cache import CompilerCache, find_compiler_cache, launcher_settings
from kernel_builder.env_choice import EnvChooser
from kernel_builder.errors import BuildError, KbuildError, VariantError
from kernel_builder.fusion import load_fusions
from kernel_builder.inputs import input_files, input_hash
from kernel_builder.locks import exclusive_lock
from kernel_builder.manifest import Manifest, load_manifest
from kernel_builder.plan import BuildJob, kernel_work_root, naming_style, plan_build
from kernel_builder.progress import Progress
from kernel_builder.report import BuildReport, JobResult, folder_size
from kernel_builder.runtime.digest import verify_digest
from kernel_builder.scheduler import Scheduler, Slots, plan_slots
from kernel_builder.runners import RUNNERS
from kernel_builder.selection import resolve, select
from kernel_builder.stamp import install, remove_stale_staging, stage_variant
from kernel_builder.variants import Style, Variant


@dataclass(frozen=True)
class BuildSettings:
    """What every job of one build shares, resolved once."""

    slots: Slots
    compiler_cache: CompilerCache | None = None
    progress: Progress = field(default_factory=Progress)
    smoke_test: bool = True  # import each new variant in its environment before installing it
    portable_abi: bool = False  # symbol versions beyond manylinux_2_28 fail the job (else warn)


def job_input_hash(job: BuildJob) -> str:
    backend = get_backend(job.backend)
    facts = [
        f"variant {job.variant.name}",
        f"ops {job.ops_name}",
        f"torch {job.env.torch_version} cxx11={job.env.cxx11_abi} {job.env.torch_dir}",
        f"source {job.source}",
    ]
    if job.compiled:
        facts.append(f"spec {backend.compile_spec(job).describe()}")
        facts += [f"toolchain {t}" for t in backend.toolchain_ids()]
    return input_hash(job.manifest, *facts)


def is_up_to_date(job: BuildJob, wanted_hash: str) -> bool:
    metadata_file = job.dest / "metadata.json"
    try:
        metadata = json.loads(metadata_file.read_text())
    except (OSError, ValueError):
        return False
    if metadata.get("kbuild", {}).get("input-hash") != wanted_hash:
        return False
    return not verify_digest(job.dest, metadata)


def drop_other_style(job: BuildJob) -> None:
    """One build, one folder: the same build under the other naming style (left by a build
    with the other --variant-names) goes, or the runtime would choose between two identical
    builds by folder listing, and both would be published."""
    twin = job.variant.other_style()
    if twin is not None and (job.out_dir / twin.name).is_dir():
        shutil.rmtree(job.out_dir / twin.name)


def run_job(job: BuildJob, chooser: EnvChooser, settings: BuildSettings) -> JobResult:
    start = time.perf_counter()
    label = job.variant.name
    progress = settings.progress
    stats, checks = None, ()

    def result(status: str, detail: str = "", log: bool = False) -> JobResult:
        log_file = str(job.log_file) if log and job.compiled else None
        size = folder_size(job.dest) if status in ("built", "up-to-date") else None
        return JobResult(label, job.backend, status, time.perf_counter() - start, detail, log_file, stats, size, checks)

    try:
        if job.env is None:
            if not chooser.available(job.variant):
                progress.step(label, "environment")  # created now: a minute or more of pip
            job = job.with_env(chooser.env_for(job.variant))
        wanted = job_input_hash(job)
        if is_up_to_date(job, wanted):
            drop_other_style(job)
            return result("up-to-date")
        library = None
        if job.compiled:
            backend = get_backend(job.backend)
            spec = backend.compile_spec(job)
            render_project(spec, job.work_dir)
            archs = len(backend.metadata(job).get("archs", ())) or 1
            chosen = settings.slots.for_job(archs)
            cache = settings.compiler_cache
            launchers = launcher_settings(cache, spec.languages)  # empty ones drop an old launcher
            compile_env = cache.job_environment(job.work_dir) if cache else {}
            library = build_project(
                spec, job.work_dir, job.log_file, chosen.jobs, chosen.nvcc_threads, launchers, compile_env,
                on_step=lambda step: progress.step(label, step, job.log_file),
            )
            stats = cache.job_stats(job.work_dir) if cache else None
        with _writing(job.out_dir):
            staging = stage_variant(job, library, wanted)
        progress.step(label, "check")
        report = check_variant(
            staging, smoke_test=settings.smoke_test, variant=job.variant, python=job.env.python,
            portable_abi=settings.portable_abi,
        )
        checks = report.results
        if not report.ok:
            shutil.rmtree(staging, ignore_errors=True)
            failed = [f"{c.check}: {c.detail}" for c in report.results if c.status == CHECK_FAILED]
            raise BuildError(f"check failed, the previous variant is kept: {'; '.join(failed)}")
        with _writing(job.out_dir):
            install(staging, job.dest)
            drop_other_style(job)
    except KbuildError as e:
        return result("failed", e.message, log=job.log_file.exists())
    return result("built", log=True)


@contextmanager
def _writing(out: Path) -> Iterator[None]:
    """A full disk or a read-only output folder is for the user to fix: one line naming the
    path. The previous variant stays: a failed staging is removed, and install only renames."""
    try:
        yield
    except OSError as e:
        raise BuildError(
            f"cannot write {e.filename or out}: {e.strerror or e}; the previous variant is kept "
            "(free space there, or choose a writable --out)"
        ) from None


@dataclass(frozen=True)
class _Task:
    """One unit for the scheduler: a variant job or a backend's device check."""

    label: str
    backend: str
    run: Callable[[], JobResult]


def build_kernel(
    kernel_dir: Path,
    variants: tuple[str, ...] = (),
    out_dir: Path | None = None,
    chooser: EnvChooser | None = None,
    jobs: int | None = None,
    max_jobs: int | None = None,
    nvcc_threads: int | None = None,
    matrix: str | None = None,
    shard: str | None = None,
    compiler_cache: bool | None = None,
    fail_fast: bool = False,
    smoke_test: bool = True,
    strict_abi: bool = False,
    runner: str = "local",
    progress: Progress | None = None,
    on_wait: Callable[[str], None] = lambda message: print(message, file=sys.stderr),
    variant_names: str | None = None,
) -> tuple[Manifest, BuildReport]:
    """Build `kernel_dir` for this machine (or exactly `variants`, or the `matrix` selection,
    optionally one `shard` of it) into out_dir (default build/). Selected variants this
    machine cannot build are skipped with the reason.

    `jobs` variants build at once (default: from cores and memory, kernel_builder.scheduler);
    `max_jobs` and `nvcc_threads` set the compiles within one job. `compiler_cache` turns
    the compiler cache on or off (None: KBUILD_COMPILER_CACHE, else ccache or sccache when
    installed). A failing job does not stop the others unless `fail_fast`. Every new
    variant is checked before it is installed (`smoke_test`: import it too); `strict_abi`
    fails one whose symbol versions exceed manylinux_2_28 (else a warning).

    `variant_names` ("legacy", the default, or "new") is the naming style of the variants
    kbuild picks (this machine's, the `matrix` selection); `variants` are built as spelled.

    `runner` "docker" builds every job in a container of its build image (building missing
    images first) instead of in local environments: kernel_builder.runners.docker.

    Another build of the same kernel or into the same output folder runs first; `on_wait`
    says so once (and reports image builds)."""
    started = time.perf_counter()
    found_cache = find_compiler_cache(compiler_cache)  # a missing tool that was asked for fails here
    if matrix is not None and variants:
        raise VariantError("--matrix and --variant both choose the variants; use one of them")
    manifest = load_manifest(kernel_dir)
    load_fusions(manifest.root)  # a malformed kbuild.toml fails here, before any compile
    selected = resolve(manifest, matrix, shard)
    chooser = chooser or EnvChooser.from_options()
    progress = progress or Progress()
    out = Path(out_dir) if out_dir else manifest.root / "build"
    style = naming_style(variant_names, variants)
    requested = variants if selected is None else tuple(v.with_style(style) for v in selected)
    if runner not in RUNNERS:
        raise KbuildError(f"--runner must be one of {', '.join(RUNNERS)}, got {runner!r}", 2)
    with build_lock(manifest, out, on_wait):
        with _writing(out):
            remove_stale_staging(out)
        if runner == "docker":
            tasks, skips = _docker_tasks(manifest, out, requested, compiler_cache, lambda: settings, on_wait, style)
        else:
            plan = plan_build(manifest, chooser, out, requested, skip_unbuildable=selected is not None, style=style)
            skips = [JobResult(s.variant or f"({s.backend})", s.backend, "skipped", detail=s.reason) for s in plan.skips]
            tasks = [_Task(j.variant.name, j.backend, lambda j=j: run_job(j, chooser, settings)) for j in plan.jobs]
            tasks += [
                _Task(f"({b})", b, lambda b=b, w=w: run_device_check(manifest, b, chooser, w, settings))
                for b, w in plan.device_checks
            ]
        slots = plan_slots(len(tasks), jobs, max_jobs, nvcc_threads)
        settings = BuildSettings(slots, found_cache, progress, smoke_test, portable_abi=strict_abi)
        for task in tasks:
            progress.add(task.label)

        def work(task: _Task) -> JobResult:
            result = task.run()
            progress.finished(task.label, result.status, result.detail if not result.ok else "")
            return result

        scheduler = Scheduler(
            work, failed=lambda r: not r.ok,
            cancelled=lambda t: JobResult(t.label, t.backend, "cancelled", detail="not started: another job failed (--fail-fast)"),
            concurrent=slots.concurrent, fail_fast=fail_fast,
        )
        with progress:
            results = skips + scheduler.run(tasks)
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
) -> tuple[list[_Task], list[JobResult]]:
    """One container job per requested variant (default: every variant of the matrix the
    kernel admits on this machine's platform); variants without a build image are skipped."""
    from kernel_builder.docker_images import build_images, image_for
    from kernel_builder.runners.docker import build_in_container, default_compiler_cache_dir, docker_client

    # plan_build does this for local jobs: a file outside the repo fails before any image or compile.
    input_files(manifest)
    variants = [v if isinstance(v, Variant) else Variant.parse(v) for v in requested]
    if not requested:
        here = "-".join(host_platform())
        variants = [v.with_style(style) for v in select(manifest, "all") if v.platform in (here, None)]
    skips, buildable = [], []
    for variant in variants:
        try:
            image_for(variant)
            buildable.append(variant)
        except KbuildError as e:
            skips.append(JobResult(variant.name, variant.backend, "skipped", detail=e.message))
    if not buildable:
        return [], skips
    client = docker_client()
    build_images(buildable, client, say=say)  # the missing ones; present images are kept
    cache_folder = default_compiler_cache_dir(compiler_cache)

    def job(variant: Variant) -> JobResult:
        current = settings()
        return build_in_container(
            variant, manifest.root, out, client, compiler_cache_dir=cache_folder, parallelism=current.slots.for_job(),
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
