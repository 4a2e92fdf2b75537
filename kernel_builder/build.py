"""`kbuild build`: run every job of a plan, skipping those whose inputs did not change.

Each job: hash its inputs; if the existing variant folder carries the same hash and its
digests still hold, it is up to date. Otherwise generate the CMake project, build with
Ninja, stage the variant folder and move it into place."""

from __future__ import annotations

import json
import sys
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from kernel_builder.backends import get_backend
from kernel_builder.cache import cache_dir, short_key
from kernel_builder.cmake import build_project, render_project
from kernel_builder.compiler_cache import CacheStats, CompilerCache, find_compiler_cache, launcher_settings
from kernel_builder.env_choice import EnvChooser
from kernel_builder.errors import KbuildError, VariantError
from kernel_builder.inputs import input_hash
from kernel_builder.locks import exclusive_lock
from kernel_builder.fusion import load_fusions
from kernel_builder.manifest import Manifest, load_manifest
from kernel_builder.parallelism import compile_parallelism
from kernel_builder.plan import BuildJob, kernel_work_root, plan_build
from kernel_builder.runtime.digest import verify_digest
from kernel_builder.selection import resolve
from kernel_builder.stamp import install, remove_stale_staging, stage_variant


@dataclass(frozen=True)
class JobResult:
    variant: str
    backend: str
    status: str  # built | up-to-date | checked (device code compiled, no variant) | skipped | failed
    seconds: float = 0.0
    detail: str = ""
    log: str | None = None
    compiler_cache: CacheStats | None = None  # None: no cache, or nothing compiled

    @property
    def ok(self) -> bool:
        return self.status != "failed"

    @property
    def label(self) -> str:
        """The variant, or the backend where none was chosen (a skipped backend, a device check)."""
        return self.backend if self.variant.startswith("(") else self.variant


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


def run_job(
    job: BuildJob,
    chooser: EnvChooser,
    on_build: Callable[[BuildJob], None] | None = None,
    jobs: int | None = None,
    nvcc_threads: int | None = None,
    compiler_cache: CompilerCache | None = None,
) -> JobResult:
    start = time.perf_counter()
    stats = None

    def result(status: str, detail: str = "", log: bool = False) -> JobResult:
        log_file = str(job.log_file) if log and job.compiled else None
        return JobResult(job.variant.name, job.backend, status, time.perf_counter() - start, detail, log_file, stats)

    try:
        if job.env is None:
            job = job.with_env(chooser.env_for(job.variant))
        wanted = job_input_hash(job)
        if is_up_to_date(job, wanted):
            return result("up-to-date")
        if on_build:
            on_build(job)
        library = None
        if job.compiled:
            backend = get_backend(job.backend)
            spec = backend.compile_spec(job)
            render_project(spec, job.work_dir)
            archs = len(backend.metadata(job).get("archs", ())) or 1
            chosen = compile_parallelism(archs, jobs, nvcc_threads)
            launchers = launcher_settings(compiler_cache, spec.languages)  # empty ones drop an old launcher
            compile_env = compiler_cache.job_environment(job.work_dir) if compiler_cache else {}
            library = build_project(
                spec, job.work_dir, job.log_file, chosen.jobs, chosen.nvcc_threads, launchers, compile_env
            )
            stats = compiler_cache.job_stats(job.work_dir) if compiler_cache else None
        install(stage_variant(job, library, wanted), job.dest)
    except KbuildError as e:
        return result("failed", e.message, log=job.log_file.exists())
    return result("built", log=True)


def build_kernel(
    kernel_dir: Path,
    variants: tuple[str, ...] = (),
    out_dir: Path | None = None,
    chooser: EnvChooser | None = None,
    on_build: Callable[[BuildJob], None] | None = None,
    jobs: int | None = None,
    nvcc_threads: int | None = None,
    matrix: str | None = None,
    shard: str | None = None,
    compiler_cache: bool | None = None,
    on_wait: Callable[[str], None] = lambda message: print(message, file=sys.stderr),
) -> tuple[Manifest, list[JobResult]]:
    """Build `kernel_dir` for this machine (or exactly `variants`, or the `matrix` selection,
    optionally one `shard` of it) into out_dir (default build/). Selected variants this
    machine cannot build are skipped with the reason.

    `jobs` and `nvcc_threads` override the parallelism derived from cores and memory;
    `compiler_cache` turns the compiler cache on or off (None: KBUILD_COMPILER_CACHE, else
    ccache or sccache when installed). Another build of the same kernel or into the same
    output folder runs first; `on_wait` says so once."""
    found_cache = find_compiler_cache(compiler_cache)  # a missing tool that was asked for fails here
    if matrix is not None and variants:
        raise VariantError("--matrix and --variant both choose the variants; use one of them")
    manifest = load_manifest(kernel_dir)
    load_fusions(manifest.root)  # a malformed kbuild.toml fails here, before any compile
    selected = resolve(manifest, matrix, shard)
    chooser = chooser or EnvChooser.from_options()
    out = Path(out_dir) if out_dir else manifest.root / "build"
    requested = variants if selected is None else tuple(selected)
    with build_lock(manifest, out, on_wait):
        plan = plan_build(manifest, chooser, out, requested, skip_unbuildable=selected is not None)
        remove_stale_staging(out)
        results = [JobResult(s.variant or f"({s.backend})", s.backend, "skipped", detail=s.reason) for s in plan.skips]
        results += [run_job(job, chooser, on_build, jobs, nvcc_threads, found_cache) for job in plan.jobs]
        results += [run_device_check(manifest, backend, chooser, work_dir) for backend, work_dir in plan.device_checks]
    return manifest, results


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
        held.enter_context(exclusive_lock(kernel_lock, on_wait=waiting_for(f"of {manifest.root}")))
        held.enter_context(exclusive_lock(output_lock, on_wait=waiting_for(f"writing to {out}")))
        yield


def run_device_check(manifest: Manifest, backend: str, chooser: EnvChooser, work_dir: Path) -> JobResult:
    """Compile a backend's device code without claiming a variant (ROCm without ROCm torch)."""
    start = time.perf_counter()
    log = work_dir / "build.log"
    try:
        check = get_backend(backend).device_check(manifest, chooser.primary, work_dir)
    except KbuildError as e:
        return JobResult(f"({backend})", backend, "failed", time.perf_counter() - start, e.message, str(log))
    status = "checked" if check.checked else "skipped"
    return JobResult(f"({backend})", backend, status, time.perf_counter() - start, check.summary, str(log))
