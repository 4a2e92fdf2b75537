"""`kbuild plan --input-ids`: each planned job's input id, the key a build looks the variant up
by in its output cache (kernel_builder.assemble.output_cache), computed as the local runner
computes it before compiling: the job's build environment found (or created) and its
toolchain prepared, then kernel_builder.runners.local.job_input_hash. Nothing is compiled.

A CI job keys its stored outputs by these ids (kbuild ci github), so that a run whose inputs
match a stored build restores exactly that build."""

from __future__ import annotations

from typing import Iterable

from kernel_builder.compile.backends import get_backend
from kernel_builder.compile.job import BuildJob
from kernel_builder.environments.choice import EnvChooser

INPUT_ID = "input-id"  # the key of each row of `kbuild plan --json --input-ids`


def job_input_id(job: BuildJob, chooser: EnvChooser) -> str:
    """The id `kbuild build` will look `job` up by (the environment made now is the one it uses)."""
    from kernel_builder.runners.local import job_input_hash

    if job.env is None:
        job = job.with_env(chooser.env_for(job.variant))
    get_backend(job.backend).prepare(job, say=chooser.say, progress=lambda text: None)
    return job_input_hash(job)


def input_ids(jobs: Iterable[BuildJob], chooser: EnvChooser) -> dict[str, str]:
    """variant name -> input id, for every job."""
    return {job.variant.name: job_input_id(job, chooser) for job in jobs}

