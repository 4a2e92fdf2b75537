"""The local runner: one build job in this process, with this machine's toolchain.

Hash the job's inputs; if the existing variant folder carries the same hash and its digests
still hold, it is up to date. Else, with an output cache, a verified entry of that hash is
installed instead of compiling (kernel_builder.assemble.output_cache). Otherwise generate the CMake project, build with Ninja, stage
the variant folder, check it (kernel_builder.checks.variant_checks) and only then move it
into place: a variant that fails its checks never replaces the previous one."""

from __future__ import annotations

import shutil
import time
from dataclasses import replace
from contextlib import ExitStack, nullcontext
from pathlib import Path

from kernel_builder.assemble.output_cache import OutputCacheError
from kernel_builder.assemble.stamp import install, python_pins_of, stage_variant
from kernel_builder.checks.import_process import ImportProcess
from kernel_builder.checks.variant_checks import FAILED as CHECK_FAILED
from kernel_builder.checks.variant_checks import WARNING, CheckResult, check_variant
from kernel_builder.compile.backends import get_backend
from kernel_builder.compile.cmake import build_project, compiled_sources, render_project
from kernel_builder.compile.compiler_cache import launcher_settings
from kernel_builder.compile.fixed_paths import fixed_compile_paths, real_paths
from kernel_builder.compile.job import BuildJob
from kernel_builder.compile.job_folders import EMBEDDED_ROOT, job_folders, neutral, reproducible
from kernel_builder.compile.backends.base import tool_identity, without_tool_path
from kernel_builder.environments.choice import EnvChooser
from kernel_builder.environments.cross_env import runnable_python
from kernel_builder.errors import BuildError, Interrupted, KbuildError
from kernel_builder.kernel.manifest import Manifest
from kernel_builder.kernel.sources import input_hash
from kernel_builder.runners.base import BuildSettings, Honoured, Refused, Runner, RunRequest, Task, writing_to
from kernel_builder.runners.result import FROM_OUTPUT_CACHE, JobResult, folder_size
from kernel_builder.runtime.digest import verify_digest
from kernel_builder.runtime.files import JsonFileError, load_json_file
from kernel_builder.variants import Variant


OUTPUT_CACHE_CHECK = "output-cache"  # the name its warnings go by among a job's checks


def job_input_hash(job: BuildJob) -> str:
    """The job's input id: what it reads and builds with, by content and identity, never by
    where it is (kernel_builder.compile.job_folders), so that a second checkout or runner with
    the same kernel, variant and toolchain gets the same id and shares the built variant."""
    env = job.env
    backend = get_backend(job.backend)
    facts = [
        f"variant {job.variant.name}",
        f"ops {job.ops_name}",
        f"torch {env.torch_version} cxx11={env.cxx11_abi} cuda={env.cuda} hip={env.hip} xpu={env.xpu}",
        f"python {env.python_version}",
        # Whether a commit is recorded, not which: a commit that changes nothing the build
        # reads keeps the build (and the commit it records); the first commit re-stamps it.
        f"git {job.source is not None}",
        # The python-depends releases metadata.json records (environments.python_pins).
        f"python-pins {sorted(python_pins_of(job).items())}",
    ]
    if job.compiled:
        folders = job_folders(job)
        spec = backend.compile_spec(job)
        # The compilers by what they are (`--version`), not where they are installed.
        compilers = {key: path for key, path in spec.cache.items() if key.endswith("_COMPILER")}
        facts.append(f"spec {neutral(spec, {**folders, **compilers}).describe()}")
        # The order of the compiles' prefix maps (reproducible) follows the folders' lengths,
        # which differ by runner; what they embed does not.
        facts.append(f"embedded {EMBEDDED_ROOT}/{{{','.join(sorted(folders))}}}")
        facts += [f"compiler {key} {tool_identity(path)}" for key, path in sorted(compilers.items())]
        facts += [f"toolchain {without_tool_path(t)}" for t in backend.toolchain_ids()]
    return input_hash(job.manifest, *facts)


def is_up_to_date(dest: Path, wanted_hash: str) -> bool:
    """Whether the variant folder `dest` is the build of `wanted_hash`, its digests intact."""
    # The bounded reader the loader uses: a planted FIFO, a link to a device or deeply nested
    # JSON in build/ makes the variant out of date (and rebuilt), never a hang or a traceback.
    try:
        metadata = load_json_file(dest / "metadata.json")
    except (OSError, JsonFileError):
        return False
    stamp = metadata.get("kbuild") if isinstance(metadata, dict) else None
    if not isinstance(stamp, dict) or stamp.get("input-hash") != wanted_hash:
        return False
    return not verify_digest(dest, metadata)


def drop_other_style(variant: Variant, out_dir: Path) -> None:
    """One build, one folder: the same build under the other naming style (left by a build
    with the other --variant-names) goes, or the runtime would choose between two identical
    builds by folder listing, and both would be published."""
    twin = variant.other_style()
    if twin is not None and (out_dir / twin.name).is_dir():
        shutil.rmtree(out_dir / twin.name)


def run_job(job: BuildJob, chooser: EnvChooser, settings: BuildSettings) -> JobResult:
    start = time.perf_counter()
    label = job.variant.name
    progress = settings.progress
    stats, checks, compiled = None, (), None
    cache_warnings: list[CheckResult] = []  # an entry refused, an upload lost: reported, never fatal
    # The work tree's build.log is this run's only once it compiles: a job that fails before
    # (its environment, its inputs) must not show the previous build's log as its own.
    logged = False

    def result(status: str, detail: str = "", log: bool = False) -> JobResult:
        log_file = str(job.log_file) if log and job.compiled else None
        size = folder_size(job.dest) if status in ("built", "up-to-date") else None
        return JobResult(label, job.backend, status, time.perf_counter() - start, detail, log_file, stats, size,
                         (*checks, *cache_warnings), compiled)

    def cache_warning(message: str) -> None:
        cache_warnings.append(CheckResult(OUTPUT_CACHE_CHECK, WARNING, message))

    def doing(text: str) -> None:  # what pip downloads, shown in the job's "environment" step
        progress.doing(label, text, step="environment")

    try:
        if job.env is None:
            if not chooser.available(job.variant):
                progress.step(label, "environment")  # created now: a minute or more of pip
            job = job.with_env(chooser.env_for(job.variant, progress=doing))
        get_backend(job.backend).prepare(job, say=chooser.say, progress=doing)
        settings.tools.raise_if_stopped()
        wanted = job_input_hash(job)
        if is_up_to_date(job.dest, wanted):
            drop_other_style(job.variant, job.out_dir)
            return result("up-to-date")
        cache = settings.output_cache
        if cache is not None:
            progress.step(label, "output cache")
            with writing_to(job.out_dir):
                if cache.fetch(wanted, job.dest, warn=cache_warning):
                    drop_other_style(job.variant, job.out_dir)
                    return result("up-to-date", FROM_OUTPUT_CACHE)
        with ExitStack() as held:
            prepared = None
            python = job.env.python
            if settings.import_check and job.compiled:
                # Another architecture's variant imports in its emulated Python, made on first need.
                python = runnable_python(job.env, chooser.say, doing)
                # torch is imported for the check while the compiler runs (import_process).
                prepared = held.enter_context(ImportProcess(python))
            library = None
            if job.compiled:
                logged = True
                library, compiled = compile_job(job, settings)
                stats = settings.compiler_cache.job_stats(job.work_dir) if settings.compiler_cache else None
            settings.tools.raise_if_stopped()  # a compiled library stays in the work tree for the next build
            with writing_to(job.out_dir):
                staging = stage_variant(job, library, wanted)
            progress.step(label, "check")
            report = check_variant(
                staging, import_check=settings.import_check, strict_abi=settings.strict_abi,
                variant=job.variant, python=python, prepared=prepared,
            )
        checks = report.results
        if not report.ok:
            shutil.rmtree(staging, ignore_errors=True)
            failed = [f"{c.check}: {c.detail}" for c in report.results if c.status == CHECK_FAILED]
            raise BuildError(f"check failed, the previous variant is kept: {'; '.join(failed)}")
        with writing_to(job.out_dir):
            install(staging, job.dest)
            drop_other_style(job.variant, job.out_dir)
        if cache is not None:
            progress.step(label, "output cache")
            try:
                cache.store(wanted, job.dest)
            except OutputCacheError as e:
                cache_warning(f"{e.message}; the variant is built and installed")
    except KbuildError as e:
        if isinstance(e, Interrupted) or settings.tools.stopped:
            # A tool ended by a signal, or a step that failed because the build was stopped
            # (Ctrl-C also reaches an import check): not the kernel's failure.
            return result("cancelled", e.message, log=logged and job.log_file.exists())
        return result("failed", e.message, log=logged and job.log_file.exists())
    return result("built", log=True)


def compile_job(job: BuildJob, settings: BuildSettings) -> tuple[Path, tuple[str, ...]]:
    """Configure and build the job's CMake project: the compiled library (in the work tree)
    and the sources Ninja compiled, relative to the kernel where they are in it. Through a
    cache shared beyond this machine, it compiles in fixed paths (fixed_paths)."""
    backend = get_backend(job.backend)
    archs = len(backend.metadata(job).get("archs", ())) or 1
    chosen = settings.slots.for_job(archs)
    cache = settings.compiler_cache
    shared = cache is not None and cache.shared_beyond_this_machine
    folders = job_folders(job)
    with fixed_compile_paths(job) if shared else nullcontext(real_paths(job)) as paths:
        # The library names no folder of this runner (job_folders): built anywhere, the same bytes.
        spec = reproducible(paths.apply(backend.compile_spec(job)), paths.compiled(folders))
        render_project(spec, job.work_dir)
        launchers = launcher_settings(cache, spec.languages)  # empty ones drop an old launcher
        compile_env = cache.job_environment(job.work_dir) if cache else {}
        library = paths.real(build_project(
            spec, paths.work_dir, job.log_file, chosen.jobs, chosen.nvcc_threads, launchers, compile_env,
            on_step=lambda step: settings.progress.step(job.variant.name, step, job.log_file), tools=settings.tools,
        ))
        sources = (paths.real(Path("/" + s)) for s in compiled_sources(job.log_file))
        root = job.manifest.root
        return library, tuple(str(p.relative_to(root)) if p.is_relative_to(root) else str(p) for p in sources)


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


_SLOTS = "each job's compiles at once (BuildSettings.slots)"
_CHECKS = "the variant's checks (BuildSettings)"
_CACHE = "the jobs' compiler cache (BuildSettings)"
_OUTPUT_CACHE = "each job looks its input id up before compiling, uploads after (BuildSettings)"


class LocalRunner(Runner):
    """Jobs in this process, in this machine's build environments (the plan's)."""

    name = "local"
    options = {
        "KERNEL_DIR": Honoured("the plan's manifest"),
        "--variant": Honoured("the plan's jobs"),
        "--matrix": Honoured("the plan's jobs"),
        "--shard": Honoured("the plan's jobs"),
        "--variant-names": Honoured("the plan's jobs"),
        "--out": Honoured("each job's output folder"),
        "--env": Honoured("the environment chooser"),
        "--create-env": Honoured("the environment chooser"),
        "--torch-index": Honoured("the environment chooser (managed environments' torch)"),
        "--jobs": Honoured("the scheduler"),
        "--max-jobs": Honoured(_SLOTS),
        "--nvcc-threads": Honoured(_SLOTS),
        "--fail-fast": Honoured("the scheduler"),
        "--runner": Honoured("the registry"),
        "--base-image": Refused("it is the base of the docker runner's images: add --runner docker or drop it"),
        "--strict-abi": Honoured(_CHECKS),
        "--import-check": Honoured(_CHECKS),
        "--compiler-cache": Honoured(_CACHE),
        "--compiler-cache-tool": Honoured(_CACHE),
        "--dist-scheduler": Honoured(_CACHE),
        "--dist-token": Honoured(_CACHE),
        "--dist-fallback-local": Honoured(_CACHE),
        "--cuda-arch": Honoured("the plan's jobs (their architectures and work tree)"),
        "--json": Honoured("kbuild's report"),
        "--output-cache": Honoured(_OUTPUT_CACHE),
        "--output-cache-mode": Honoured(_OUTPUT_CACHE),
    }

    def tasks(self, request: RunRequest) -> tuple[list[Task], list[JobResult]]:
        plan = request.plan_here()
        skips = [JobResult(s.variant or f"({s.backend})", s.backend, "skipped", detail=s.reason) for s in plan.skips]
        chooser = request.chooser
        tasks = [Task(j.variant.name, j.backend, lambda settings, j=j: run_job(j, chooser, settings)) for j in plan.jobs]
        tasks += [
            Task(f"({b})", b, lambda settings, b=b, w=w: run_device_check(request.manifest, b, chooser, w, settings))
            for b, w in plan.device_checks
        ]
        return tasks, skips
