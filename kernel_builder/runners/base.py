"""What every runner is: the `Runner` interface, the `Task`s it hands the build's scheduler,
and its decision on each option of `kbuild build`.

The pipeline (kernel_builder.pipeline.build_kernel) resolves the options, selects the variants and
asks the runner named by --runner (kernel_builder.runners.get_runner) for its tasks; it never
knows which runner it drives. A runner says of every option of `kbuild build` how it honours
it or why it cannot (`Honoured`, `Refused`): a refused option fails the build up front in one
line naming the option and the runner, and tests/runners/test_runner_options.py fails on an
option a runner has no decision for.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, Mapping, Protocol

from kernel_builder.assemble.output_cache import OutputCache
from kernel_builder.compile.compiler_cache import CompilerCache, find_compiler_cache
from kernel_builder.compile.parallelism import Slots
from kernel_builder.compile.tool_processes import ToolProcesses
from kernel_builder.environments.choice import EnvChooser
from kernel_builder.errors import BuildError, UsageError
from kernel_builder.kernel.manifest import Manifest
from kernel_builder.runners.progress import Progress
from kernel_builder.runners.result import JobResult
from kernel_builder.variants import Style, Variant


@dataclass(frozen=True)
class BuildSettings:
    """What every job of one build shares, resolved once (the options keep their names from
    kernel_builder.pipeline.options.BuildOptions, which gives their defaults)."""

    slots: Slots
    compiler_cache: CompilerCache | None
    progress: Progress
    import_check: bool  # import each new variant in its environment before installing it
    strict_abi: bool  # symbol versions beyond manylinux_2_28 fail the job (else warn)
    tools: ToolProcesses = field(default_factory=ToolProcesses)  # stopped on an interrupt
    output_cache: OutputCache | None = None  # where a job looks its input id up before compiling


@dataclass(frozen=True)
class Task:
    """One unit for the scheduler: a variant's job or a backend's device check, run with
    the settings every job of the build shares."""

    label: str
    backend: str
    run: Callable[[BuildSettings], JobResult]


@dataclass(frozen=True)
class Honoured:
    how: str  # where the option reaches the job, for CONTRIBUTING.md's table


@dataclass(frozen=True)
class Refused:
    why: str  # the rest of the one-line message: why, and what to do instead


class Plan(Protocol):
    """The jobs this machine's build environments can run, and the skips (kernel_builder.pipeline.plan.Plan)."""

    jobs: tuple
    skips: tuple
    device_checks: tuple


@dataclass(frozen=True)
class RunRequest:
    """What one build asks of its runner, resolved by the pipeline."""

    manifest: Manifest
    out: Path
    # Exactly these variants, or () for the runner's default on this machine.
    requested: tuple[str | Variant, ...]
    style: Style
    options: Any  # kernel_builder.pipeline.options.BuildOptions (a later stage: not imported here)
    chooser: EnvChooser
    # The plan for this machine's build environments (kernel_builder.pipeline.plan.plan_build).
    plan_here: Callable[[], Plan]
    # The variants of the default matrix the kernel admits (kernel_builder.pipeline.selection.select).
    admitted: Callable[[], list[Variant]]
    say: Callable[[str], None] = lambda message: None


class Runner(ABC):
    """Where a build's jobs run. A subclass names itself, decides every option of `kbuild
    build` (keys: the option's flag as `--help` shows it, KERNEL_DIR for the argument),
    and makes the tasks."""

    name: ClassVar[str]
    options: ClassVar[Mapping[str, Honoured | Refused]]

    def check(self, given: Mapping[str, object]) -> None:
        """A UsageError naming the first refused option among `given` (flag -> the value
        the user gave, defaults left out)."""
        for flag, value in given.items():
            decision = self.options.get(flag.replace("--no-", "--", 1)) or self.options.get(flag)
            if isinstance(decision, Refused):
                raise UsageError(f"--runner {self.name} cannot honour {flag}: {decision.why}")

    def compiler_cache(self, request: RunRequest) -> CompilerCache | None:
        """The compiler cache this machine's compiles go through (None: none here)."""
        return find_compiler_cache(request.options.compiler_cache)

    @abstractmethod
    def tasks(self, request: RunRequest) -> tuple[list[Task], list[JobResult]]:
        """The tasks of the build, and a skipped JobResult for each variant it cannot build."""


@contextmanager
def writing_to(out: Path) -> Iterator[None]:
    """A full disk or a read-only output folder is for the user to fix: one line naming the
    path. The previous variant stays: a failed staging is removed, and install only renames."""
    try:
        yield
    except OSError as e:
        raise BuildError(
            f"cannot write {e.filename or out}: {e.strerror or e}; the previous variant is kept "
            "(free space there, or choose a writable --out)"
        ) from None
