"""Where a build's jobs run, behind one interface (kernel_builder.runners.base.Runner):
`local` (kernel_builder.runners.local: in this process, with this machine's toolchain) or
`docker` (kernel_builder.runners.docker: one container per job, from the build images of
kernel_builder.runners.docker_images, running the same build entry). A new runner is a
module with a Runner subclass and one line in RUNNER_CLASSES."""

from __future__ import annotations

from kernel_builder.errors import UsageError
from kernel_builder.runners.base import Runner
from kernel_builder.runners.docker import DockerRunner
from kernel_builder.runners.local import LocalRunner

RUNNER_CLASSES: dict[str, type[Runner]] = {runner.name: runner for runner in (LocalRunner, DockerRunner)}
RUNNERS = tuple(RUNNER_CLASSES)


def get_runner(name: str) -> Runner:
    """The runner --runner names; a UsageError naming the choices for another."""
    if name not in RUNNER_CLASSES:
        raise UsageError(f"--runner must be one of {', '.join(RUNNERS)}, got {name!r}")
    return RUNNER_CLASSES[name]()
