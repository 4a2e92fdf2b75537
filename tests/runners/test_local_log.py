"""A local job's log is this run's own: one that fails before it compiles shows no log, not
the previous build's (issue 30)."""

from __future__ import annotations

from pathlib import Path

from conftest import copy_example

from kernel_builder.compile.job import BuildJob
from kernel_builder.compile.parallelism import Slots
from kernel_builder.errors import EnvironmentCreateError
from kernel_builder.kernel.manifest import load_manifest
from kernel_builder.runners.base import BuildSettings
from kernel_builder.runners.local import run_job
from kernel_builder.runners.progress import Progress
from kernel_builder.variants import arch_variant


class FailingChooser:
    """An environment store whose creation fails, as a broken index makes it."""

    def available(self, variant) -> bool:
        return False

    def env_for(self, variant, **kwargs):
        raise EnvironmentCreateError("cannot create build environment torch214-cu130: pip failed")


def test_a_job_failing_before_it_compiles_shows_no_earlier_log(tmp_path: Path):
    root = copy_example("relu", tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / "build.log").write_text("[1/3] Building CXX object ... the previous build's compile\n")
    variant = arch_variant((2, 14), "cuda", (13, 0), "x86_64", "linux")
    job = BuildJob(load_manifest(root), None, variant, "cuda", "abc1234", None, root / "build", work)
    settings = BuildSettings(Slots(1, 1, None), None, Progress(), import_check=False, strict_abi=False)
    result = run_job(job, FailingChooser(), settings)
    assert result.status == "failed" and "pip failed" in result.detail
    assert result.log is None and result.compiled is None
