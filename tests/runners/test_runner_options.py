"""Every option of `kbuild build`, under every runner, reaches the job or is refused up front
in one line naming the option and the runner. The options come from the Typer command, so a
new option without a decision of each runner (kernel_builder.runners.base.Runner.options), a
way to give it (GIVE) and a check that it reaches the job (REACHES) fails here.

What "the job" is: for docker the build image and the container the runner makes (its
command line, environment and mounts; no engine needed); for local what run_job and the
plan receive (the run request, the environment chooser, the build settings). In-process,
no build."""

from __future__ import annotations

import ast
import dataclasses
import json
import shutil
import sys
from unittest import mock
from pathlib import Path
from typing import Callable

import pytest
import typer.main
from typer.testing import CliRunner

import kernel_builder.pipeline.build_kernel as pipeline
import kernel_builder.pipeline.plan_assembly as plan_assembly
from kernel_builder.pipeline.options import BuildOptions
from kernel_builder.pipeline.build_kernel import build_kernel, job_settings, run_request
from kernel_builder.pipeline.report import BuildReport
from kernel_builder.cli.main import app
from kernel_builder.errors import UsageError
from kernel_builder.kernel.manifest import load_manifest
from kernel_builder.runners import RUNNER_CLASSES, get_runner
from kernel_builder.runners.base import Honoured, Refused, Task
from kernel_builder.runners.docker import DockerRunner
from kernel_builder.runners.docker_output_cache import probe_command
from kernel_builder.runners.result import JobResult
from kernel_builder.variants import Style, Variant

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "tiny"
CPU = "torch214-cxx11-cpu-x86_64-linux"
INDEX = "https://builder:IDXs3cr3t@mirror.example/whl/simple/"


def _flag(param) -> str:
    if param.param_type_name == "argument":
        return param.name.upper()
    return next(o for o in param.opts if o.startswith("--"))


BUILD_OPTIONS = [_flag(p) for p in typer.main.get_command(app).commands["build"].params]

# How a test gives each option a value other than its default (KERNEL_DIR: the kernel itself).
GIVE: dict[str, list[str]] = {
    "KERNEL_DIR": [],
    "--variant": ["--variant", CPU],
    "--matrix": ["--matrix", "backend=cpu arch=x86_64"],
    "--shard": ["--matrix", "backend=cpu arch=x86_64", "--shard", "2/2"],
    "--variant-names": ["--variant-names", "new"],
    "--out": ["--out", "{tmp}/elsewhere"],
    "--env": ["--env", sys.prefix],
    "--create-env": ["--no-create-env"],
    "--torch-index": ["--torch-index", INDEX],
    "--jobs": ["--jobs", "3"],
    "--max-jobs": ["--max-jobs", "5"],
    "--nvcc-threads": ["--nvcc-threads", "2"],
    "--fail-fast": ["--fail-fast"],
    "--runner": [],  # every case names its runner
    "--base-image": ["--base-image", "example.org/base:1"],
    "--strict-abi": ["--strict-abi"],
    "--import-check": ["--no-import-check"],
    "--compiler-cache": ["--no-compiler-cache"],
    "--compiler-cache-tool": ["--compiler-cache-tool", "ccache"],
    "--dist-scheduler": ["--dist-scheduler", "http://127.0.0.1:9/", "--dist-fallback-local"],
    "--dist-token": ["--dist-token", "t0k3n"],
    "--dist-fallback-local": ["--dist-fallback-local"],
    "--cuda-arch": ["--cuda-arch", "9.0"],
    "--json": ["--json"],
    "--output-cache": ["--output-cache", "{tmp}/store"],
    "--output-cache-mode": ["--output-cache", "{tmp}/store", "--output-cache-mode", "read"],
}


@pytest.fixture
def kernel(tmp_path) -> Path:
    return Path(shutil.copytree(TINY, tmp_path / "tiny"))


# What an option needs beside it where it is honoured: the token and the fallback go with a scheduler.
WITH = {flag: ["--dist-scheduler", "http://127.0.0.1:9/"] for flag in ("--dist-token", "--dist-fallback-local")}


def _argv(flag: str, runner: str, kernel: Path, honoured: bool = False) -> list[str]:
    """`kbuild build` of `kernel` under `runner`, giving `flag` (and what it needs beside it where honoured)."""
    given = [a.replace("{tmp}", str(kernel.parent)) for a in GIVE[flag] + (WITH.get(flag, []) if honoured else [])]
    return ["build", str(kernel), "--runner", runner, *given]


def _options(argv: list[str], monkeypatch) -> BuildOptions:
    """The BuildOptions `kbuild build argv` makes (the pipeline, stopped at its door, builds nothing)."""
    captured = {}

    def stop(kernel_dir, options, **_):
        captured["options"] = options
        raise SystemExit(0)

    monkeypatch.setattr(pipeline, "build_kernel", stop)
    result = CliRunner().invoke(app, argv)
    assert "options" in captured, result.output
    return captured["options"]


# -- decisions ---------------------------------------------------------------------------
@pytest.mark.parametrize("runner", sorted(RUNNER_CLASSES))
def test_each_runner_decides_every_build_option(runner):
    decided = set(RUNNER_CLASSES[runner].options)
    assert decided == set(BUILD_OPTIONS), (
        f"{runner}: no decision for {sorted(set(BUILD_OPTIONS) - decided)}; stale: {sorted(decided - set(BUILD_OPTIONS))}"
    )
    assert set(GIVE) == set(BUILD_OPTIONS), "give every new option a value in GIVE and a check in REACHES"


def test_the_pipeline_names_no_runner():
    """pipeline/build_kernel.py reaches runners through the registry and the interface only."""
    source = (REPO / "kernel_builder" / "pipeline" / "build_kernel.py").read_text()
    modules = {n.module for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom)}
    runner_modules = {m for m in modules if m.startswith("kernel_builder.runners.")}
    assert runner_modules <= {"kernel_builder.runners.base", "kernel_builder.runners.progress", "kernel_builder.runners.result"}
    assert not any(f'"{name}"' in source or f"'{name}'" in source for name in RUNNER_CLASSES)


def decision_table() -> str:
    """The option x runner table CONTRIBUTING.md holds, from the runners' decisions."""
    runners = sorted(RUNNER_CLASSES)
    lines = ["| option | " + " | ".join(f"`--runner {r}`" for r in runners) + " |", "|---" * (len(runners) + 1) + "|"]
    for flag in BUILD_OPTIONS:
        cells = []
        for r in runners:
            decision = RUNNER_CLASSES[r].options[flag]
            cells.append(f"honoured: {decision.how}" if isinstance(decision, Honoured) else f"**refused**: {decision.why}")
        lines.append(f"| `{flag}` | " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def test_contributing_md_has_the_table_of_the_decisions():
    table = decision_table()
    assert table in (REPO / "CONTRIBUTING.md").read_text(), f"put this table in CONTRIBUTING.md:\n{table}"


REFUSALS = [(r, f) for r in sorted(RUNNER_CLASSES) for f in BUILD_OPTIONS if isinstance(RUNNER_CLASSES[r].options[f], Refused)]


@pytest.mark.parametrize(("runner", "flag"), REFUSALS)
def test_a_refused_option_fails_up_front_in_one_line(runner, flag, kernel, monkeypatch):
    monkeypatch.setattr(pipeline, "build_kernel", lambda *a, **k: pytest.fail("refused after the build started"))
    error = CliRunner().invoke(app, _argv(flag, runner, kernel)).exception  # kbuild's main prints its message
    assert isinstance(error, UsageError) and error.exit_code == 2, error
    given = next(a for a in GIVE[flag] if a.startswith("--"))
    assert "\n" not in error.message and error.message.startswith(f"--runner {runner} cannot honour {given}: "), error.message


# -- reaching the job --------------------------------------------------------------------
class Job:
    """What one runner made of a `kbuild build` command line, as far as a job sees it."""

    def __init__(self, argv: list[str], monkeypatch):
        self.options = _options(argv, monkeypatch)
        self.runner = get_runner(self.options.runner)
        self.request = run_request(load_manifest(Path(argv[1])), self.options, self.options.env_chooser())
        if isinstance(self.runner, DockerRunner):
            self.images, _ = self.runner.images(self.request)
            self.variants = [v.name for v, _ in self.images]
            self.settings = job_settings(self.options, len(self.images), None)
            variant, image = self.images[0]
            self.image = image
            self.container = self.runner.container(self.request, variant, image, self.settings, portable=False)
            self.command = list(self.container.command)
        else:
            self.variants = [v.name if isinstance(v, Variant) else v for v in self.request.requested]
            self.settings = job_settings(self.options, max(1, len(self.variants)), None)

    def argument(self, flag: str) -> str | None:
        """The value of `flag` in the container's kbuild command."""
        return self.command[self.command.index(flag) + 1] if flag in self.command else None


def _writable(job: Job, path: Path) -> bool:
    return any(m.source == path.resolve() and not m.read_only for m in job.container.mounts)


Check = Callable[[Job, Path], bool]


def _selected(expected: Callable[[Job], bool]) -> Check:
    def check(job: Job, kernel: Path) -> bool:
        assert job.variants and expected(job), job.variants
        return True
    return check


def _admitted_cpu(job: Job) -> list[str]:
    """The variants `--matrix "backend=cpu arch=x86_64"` selects."""
    return [v.with_style(job.request.style).name for v in job.request.admitted() if v.backend == "cpu" and v.arch == "x86_64"]


def _second_half(job: Job) -> bool:
    """--shard 2/2: a part of the --matrix selection, not all of it."""
    return 0 < len(job.variants) < len(_admitted_cpu(job)) and set(job.variants) <= set(_admitted_cpu(job))


class NoImages:
    """A stand-in engine that has no image at all."""

    def __init__(self):
        self.images = self

    def get(self, tag: str):
        from docker.errors import ImageNotFound

        raise ImageNotFound(f"no such image: {tag}")


def _missing_images_are_skipped(job: Job, kernel: Path) -> bool:
    """--no-create-env: a variant whose build image is missing is skipped, and nothing is built."""
    with mock.patch("kernel_builder.runners.docker.docker_client", NoImages), \
            mock.patch("kernel_builder.runners.docker_images._build", side_effect=AssertionError("built an image")):
        tasks, skips = job.runner.tasks(job.request)
    return not tasks and len(skips) == len(job.images) and all("--no-create-env" in s.detail for s in skips)


def _planned_with(job: Job) -> dict:
    """The keyword arguments the local runner's plan is made with (kernel_builder.pipeline.plan.plan_build)."""
    with mock.patch.object(plan_assembly, "plan_build", lambda *args, **kwargs: kwargs):
        return job.request.plan_here()


def _fail_fast_stops_the_scheduler(job: Job, kernel: Path) -> bool:
    """--fail-fast: once a task failed, the build's scheduler starts no other (one at a time here)."""
    tasks = [Task(name, "cpu", lambda settings, name=name, status=status: JobResult(name, "cpu", status))
             for name, status in (("first", "failed"), ("second", "built"))]
    options = dataclasses.replace(job.options, jobs=1)
    with mock.patch.object(type(job.runner), "tasks", lambda self, request: (tasks, [])):
        _, report = build_kernel(kernel, options, chooser=job.request.chooser, on_wait=lambda message: None)
    return [r.status for r in report.results] == ["failed", "cancelled"]


def _report_as_json(job: Job, kernel: Path) -> bool:
    """--json is the report's form, the same for every runner: the pipeline's report as JSON on stdout."""
    report = BuildReport("tiny", kernel / "build", (JobResult(CPU, "cpu", "built", 1.0),), 1.0, 1)
    with mock.patch.object(pipeline, "build_kernel", lambda kernel_dir, options, **_: (load_manifest(kernel_dir), report)):
        result = CliRunner().invoke(app, _argv("--json", job.runner.name, kernel))
    return result.exit_code == 0 and json.loads(result.stdout) == report.to_json()


REACHES: dict[str, dict[str, Check]] = {
    "docker": {
        "KERNEL_DIR": lambda job, k: job.container.working_dir == job.command[4] == str(k.resolve()),
        "--variant": lambda job, k: job.variants == [CPU] and job.argument("--variant") == CPU,
        "--matrix": _selected(lambda job: job.variants == _admitted_cpu(job)),
        "--shard": _selected(_second_half),
        "--variant-names": _selected(lambda job: all(n.startswith("torch-2.") for n in job.variants)),
        "--create-env": _missing_images_are_skipped,
        "--out": lambda job, k: job.argument("--out") == str((k.parent / "elsewhere").resolve())
        and _writable(job, k.parent / "elsewhere"),
        "--torch-index": lambda job, k: job.image.torch_index == INDEX
        and "IDXs3cr3t" not in json.dumps(job.image.build_args) and "mirror.example" in job.image.build_args["TORCH_INDEX_URL"],
        "--jobs": lambda job, k: job.settings.slots.concurrent == 3,
        "--max-jobs": lambda job, k: job.argument("--max-jobs") == "5" and job.container.environment["MAX_JOBS"] == "5",
        "--nvcc-threads": lambda job, k: job.argument("--nvcc-threads") == "2",
        "--fail-fast": lambda job, k: "--fail-fast" in job.command and _fail_fast_stops_the_scheduler(job, k),
        "--runner": lambda job, k: job.command[1:4] == ["-m", "kernel_builder.cli", "build"],
        "--base-image": lambda job, k: job.image.build_args["BASE_IMAGE"] == "example.org/base:1"
        and job.container.image == job.image.tag,
        "--strict-abi": lambda job, k: "--strict-abi" in job.command,  # the image is not portable: the user's word
        "--import-check": lambda job, k: "--no-import-check" in job.command,
        "--compiler-cache": lambda job, k: "--no-compiler-cache" in job.command and "CCACHE_DIR" not in job.container.environment,
        "--json": lambda job, k: _report_as_json(job, k),
        # The host reaches the store (tests/runners/test_docker_output_cache.py); the id comes
        # from the same image with the build's own arguments.
        "--output-cache": lambda job, k: job.settings.output_cache.url == str(k.parent / "store")
        and job.settings.output_cache.writable and probe_command(tuple(job.command))[3:] == tuple(job.command[4:]),
        "--output-cache-mode": lambda job, k: job.settings.output_cache.mode == "read" and not job.settings.output_cache.writable,
    },
    "local": {
        "KERNEL_DIR": lambda job, k: job.request.manifest.root == k.resolve(),
        "--variant": lambda job, k: job.variants == [CPU],
        "--matrix": _selected(lambda job: job.variants == _admitted_cpu(job)),
        "--shard": _selected(_second_half),
        "--variant-names": lambda job, k: job.request.style is Style.NEW,
        "--out": lambda job, k: job.request.out == k.parent / "elsewhere",
        "--env": lambda job, k: job.request.chooser.explicit and job.request.chooser.primary is not None,
        "--create-env": lambda job, k: job.request.chooser.create is False,
        "--torch-index": lambda job, k: job.request.chooser.index == INDEX,
        "--jobs": lambda job, k: job.settings.slots.concurrent == 3,
        "--max-jobs": lambda job, k: job.settings.slots.for_job().jobs == 5,
        "--nvcc-threads": lambda job, k: job.settings.slots.for_job(4).nvcc_threads == 2,
        "--fail-fast": _fail_fast_stops_the_scheduler,
        "--runner": lambda job, k: job.runner.name == "local",
        "--strict-abi": lambda job, k: job.settings.strict_abi,
        "--import-check": lambda job, k: job.settings.import_check is False,
        "--compiler-cache": lambda job, k: job.runner.compiler_cache(job.request) is None,
        "--compiler-cache-tool": lambda job, k: job.options.compiler_cache.tool == "ccache",
        "--dist-scheduler": lambda job, k: job.options.compiler_cache.dist_scheduler == "http://127.0.0.1:9/",
        "--dist-token": lambda job, k: job.options.compiler_cache.dist_token == "t0k3n",
        "--dist-fallback-local": lambda job, k: job.options.compiler_cache.dist_fallback_local,
        "--cuda-arch": lambda job, k: _planned_with(job)["cuda_arch"] == ("9.0",),
        "--json": lambda job, k: _report_as_json(job, k),
        "--output-cache": lambda job, k: job.settings.output_cache.url == str(k.parent / "store")
        and job.settings.output_cache.writable,
        "--output-cache-mode": lambda job, k: job.settings.output_cache.mode == "read" and not job.settings.output_cache.writable,
    },
}


HONOURED = [(r, f) for r in sorted(RUNNER_CLASSES) for f in BUILD_OPTIONS if isinstance(RUNNER_CLASSES[r].options[f], Honoured)]


@pytest.mark.parametrize(("runner", "flag"), HONOURED)
def test_an_honoured_option_reaches_the_job(runner, flag, kernel, monkeypatch):
    assert flag in REACHES[runner], f"{runner} honours {flag}: add a check to REACHES that it reaches the job"
    check = REACHES[runner][flag]
    job = Job(_argv(flag, runner, kernel, honoured=True), monkeypatch)
    assert check(job, kernel), f"{flag} did not reach the {runner} job"
