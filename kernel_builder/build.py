"""`kbuild build`: run every job of a plan, skipping those whose inputs did not change.

Each job: hash its inputs; if the existing variant folder carries the same hash and its
digests still hold, it is up to date. Otherwise generate the CMake project, build with
Ninja, stage the variant folder and move it into place."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kernel_builder.backends import get_backend
from kernel_builder.cmake import build_project, render_project
from kernel_builder.envs import BuildEnv, current_env
from kernel_builder.errors import KbuildError
from kernel_builder.inputs import input_hash
from kernel_builder.manifest import Manifest, load_manifest
from kernel_builder.plan import BuildJob, plan_build
from kernel_builder.runtime.digest import verify_digest
from kernel_builder.stamp import install, remove_stale_staging, stage_variant


@dataclass(frozen=True)
class JobResult:
    variant: str
    backend: str
    status: str  # built | up-to-date | skipped | failed
    seconds: float = 0.0
    detail: str = ""
    log: str | None = None

    @property
    def ok(self) -> bool:
        return self.status != "failed"


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


def run_job(job: BuildJob, on_build: Callable[[BuildJob], None] | None = None) -> JobResult:
    start = time.perf_counter()
    wanted = job_input_hash(job)
    if is_up_to_date(job, wanted):
        return JobResult(job.variant.name, job.backend, "up-to-date", time.perf_counter() - start)
    if on_build:
        on_build(job)
    library = None
    try:
        if job.compiled:
            spec = get_backend(job.backend).compile_spec(job)
            render_project(spec, job.work_dir)
            library = build_project(spec, job.work_dir, job.log_file)
        install(stage_variant(job, library, wanted), job.dest)
    except KbuildError as e:
        return JobResult(job.variant.name, job.backend, "failed", time.perf_counter() - start, e.message, str(job.log_file))
    return JobResult(job.variant.name, job.backend, "built", time.perf_counter() - start, log=str(job.log_file) if job.compiled else None)


def build_kernel(
    kernel_dir: Path,
    variants: tuple[str, ...] = (),
    out_dir: Path | None = None,
    env: BuildEnv | None = None,
    on_build: Callable[[BuildJob], None] | None = None,
) -> tuple[Manifest, list[JobResult]]:
    """Build `kernel_dir` for this machine (or exactly `variants`) into out_dir (default build/)."""
    manifest = load_manifest(kernel_dir)
    env = env or current_env()
    out = Path(out_dir) if out_dir else manifest.root / "build"
    plan = plan_build(manifest, env, out, variants)
    remove_stale_staging(out)
    results = [JobResult(f"({s.backend})", s.backend, "skipped", detail=s.reason) for s in plan.skips]
    results += [run_job(job, on_build) for job in plan.jobs]
    return manifest, results
