"""Building one image with BuildKit, through the `docker` command.

The Dockerfiles mount pip's settings as secrets and pip's download cache as a cache mount
(`RUN --mount`), which only BuildKit offers; the Docker SDK for Python speaks to the
classic builder alone, so images are built with the docker CLI: `docker buildx` where it
is installed, else a CLI that still has BuildKit built in (Docker 18.09 to 22.x, with
DOCKER_BUILDKIT=1). The CLI reaches the same engine as the SDK ($DOCKER_HOST).

The build uses the host's network: the package indexes are reached as the host reaches
them, and the folders kbuild serves on loopback (pip_forwarding) are on the host's
127.0.0.1.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernel_builder.errors import KbuildError
from kernel_builder.redaction import mask_credentials
from kernel_builder.runners.pip_forwarding import ForwardedPip

# BuildKit's plain progress prefixes every line with its step number ("#7 12.3 ...").
_STEP_PREFIX = re.compile(r"^#\d+ (\d+\.\d+ )?")


@dataclass(frozen=True)
class BuildKitCli:
    """How to run a BuildKit build: the argv before `build`'s own options, and extra environment."""

    argv: tuple[str, ...]
    environment: tuple[tuple[str, str], ...] = ()


@functools.cache
def buildkit_cli() -> BuildKitCli:
    """The first docker CLI on PATH that builds with BuildKit, or a KbuildError saying what
    to install."""
    candidates = _docker_commands()
    if not candidates:
        raise KbuildError("building images needs the docker command (the Docker CLI), which is not on PATH")
    for docker in candidates:
        if _succeeds([docker, "buildx", "version"]):
            return BuildKitCli((docker, "buildx", "build", "--load"))
        major = _client_major(docker)
        if major is not None and major < 23:  # BuildKit still inside `docker build`
            return BuildKitCli((docker, "build"), (("DOCKER_BUILDKIT", "1"),))
    raise KbuildError(
        "building images needs BuildKit: install Docker's buildx plugin (docker-buildx), "
        f"which {candidates[0]} lacks"
    )


def _docker_commands() -> list[str]:
    found: list[str] = []
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(folder or ".") / "docker"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            real = str(candidate.resolve())
            if real not in found:
                found.append(real)
    return found


def _succeeds(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=60, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _client_major(docker: str) -> int | None:
    try:
        out = subprocess.run([docker, "--version"], capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"version (\d+)\.", out)
    return int(match.group(1)) if match else None


def build_image(
    dockerfile: Path,
    tag: str,
    build_args: dict[str, str],
    labels: dict[str, str],
    pip: ForwardedPip,
    *,
    platform: str | None,
    rebuild: bool,
    say: Callable[[str], None],
) -> None:
    """Build `dockerfile` into `tag`, streaming BuildKit's plain output to `say`; a
    KbuildError with the failing step's last lines when the build fails."""
    cli = buildkit_cli()
    with tempfile.TemporaryDirectory(prefix="kbuild-context-") as context:
        # The Dockerfile alone is the context: it COPYs nothing, and the tag hashes it.
        shutil.copyfile(dockerfile, Path(context) / "Dockerfile")
        argv = [*cli.argv, "--progress", "plain", "--network", "host", "--tag", tag]
        if platform:
            argv += ["--platform", platform]
        if rebuild:
            argv += ["--pull", "--no-cache"]
        for key, value in sorted({**pip.proxy_args, **build_args}.items()):
            argv += ["--build-arg", f"{key}={value}"]
        for key, value in sorted(labels.items()):
            argv += ["--label", f"{key}={value}"]
        for secret_id, path in sorted(pip.secrets.items()):
            argv += ["--secret", f"id={secret_id},src={path}"]
        argv.append(context)
        _run(argv, dict(os.environ) | dict(cli.environment), tag, say)


def _run(argv: list[str], environment: dict[str, str], tag: str, say: Callable[[str], None]) -> None:
    tail: list[str] = []
    try:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   errors="replace", env=environment)
    except OSError as e:
        raise KbuildError(f"cannot run {argv[0]}: {e.strerror}") from None
    assert process.stdout is not None
    with process:
        for raw in process.stdout:
            # Masked: a step may print a URL it was given as a secret (pip's error messages).
            line = mask_credentials(_STEP_PREFIX.sub("", raw.rstrip()))
            if line.strip():
                say(line)
                tail = (tail + [line])[-_TAIL:]
    if process.returncode != 0:
        raise KbuildError(f"building image {tag} failed: {failure_reason(tail)}")


_TAIL = 60
# BuildKit's own summary lines, which repeat the failing step's whole command.
_SUMMARIES = ("ERROR: executor failed", "executor failed", "ERROR: failed to solve", "failed to solve", "------", " > [")


def failure_reason(tail: list[str]) -> str:
    """The line that says why a build failed: the last error the failing step printed
    (pip's "ERROR: No matching distribution ..."), not BuildKit's summary that repeats the
    step's command; else BuildKit's own error."""
    errors = [line.strip() for line in tail if re.match(r"\s*(ERROR|error)\b", line)]
    own = [line for line in errors if not line.startswith(_SUMMARIES)]
    chosen = (own or errors or [line.strip() for line in tail] or ["no output"])[-1]
    return chosen if len(chosen) <= 400 else chosen[:400] + " ..."
