"""The docker runner: one build job in one container, from the variant's build image
(kernel_builder.runners.docker_images).

Inside, the same build entry runs as locally, `python -m kernel_builder.cli build KERNEL
--variant V --out OUT --json`, with the image's venv as its `--env`:

- kbuild's code is the host's kernel_builder package, mounted read-only and put on
  PYTHONPATH (a checkout is mounted whole, so its git state still goes into provenance);
- the kernel's source is mounted read-only: its git work tree when it is in one, so the
  commit and dirty flag it records (and the kernel id) are those of a local build;
- the output folder, the compiler cache and the job's kbuild cache (CMake work tree and
  build log, kept for the next build and for reading the log) are mounted read-write;
- it runs as the calling user (uid:gid), so what it writes is the caller's, not root's;
- it asks for no GPU and has no network: building needs neither, and a build reads
  nothing but its mounts; the CUTLASS headers a CUDA unit's `depends` names are made on
  the host (from PyPI, or a clone named in KBUILD_CUTLASS_CHECKOUTS) and mounted
  read-only where the container's kbuild looks for them;
- it runs on its image's platform, linux/arm64 for an aarch64 variant: natively on an
  aarch64 machine, through qemu elsewhere (runners/docker_platform.py);
- on a manylinux_2_28 base, symbol versions beyond it fail the variant (--strict-abi); on
  a newer glibc (another base) they are a warning unless the user gave --strict-abi, and the
  build says which policy its results can meet (docker_images.glibc_policy);
- the build options the container's kbuild takes as they are (forwarded_flags) are passed
  on; DockerRunner.options says how each option of `kbuild build` is honoured or why not.

Every host folder appears at the same path inside, so the paths in the build's JSON
report, its messages and its logs hold on the host too. Paths the image itself uses
(/usr, /opt, /etc, ...) go under /host instead.
"""

from __future__ import annotations

import codecs
import json
import os
import shlex
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import kernel_builder
from kernel_builder.runtime.system import host_platform
from kernel_builder.compile.parallelism import Parallelism
from kernel_builder.environments import cutlass_headers
from kernel_builder.errors import KbuildError
from kernel_builder.formatting import first_line
from kernel_builder.kernel.sources import input_files
from kernel_builder.paths import cache_dir
from kernel_builder.runners.base import BuildSettings, Honoured, Refused, Runner, RunRequest, Task
from kernel_builder.runners.docker_engine import docker_client
from kernel_builder.runners.docker_output_cache import cached_build, probe_command
from kernel_builder.runners.docker_platform import cpu_description
from kernel_builder.runners.docker_images import (
    HOME,
    MANYLINUX_GLIBC,
    VENV,
    ImageSpec,
    build_images,
    glibc_policy,
    image_for,
    image_glibc,
)
from kernel_builder.runners.result import JobResult
from kernel_builder.settings import CACHE_DIR, CCACHE_DIR, COMPILER_CACHE, MAX_JOBS, NVCC_THREADS, read_environment
from kernel_builder.variants import Variant

KBUILD_PACKAGE_DIR = Path(kernel_builder.__file__).resolve().parent
# Top-level folders of the images' own filesystem: a host folder there would hide them.
_IMAGE_FOLDERS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/opt", "/proc", "/run", "/sbin", "/sys", "/usr", "/var")
_REMAPPED = "/host"


@dataclass(frozen=True, order=True)
class Mount:
    """A bind mount of a host folder."""

    target: str  # the path inside the container
    source: Path  # the host folder
    read_only: bool

    def to_api(self) -> dict:
        """The Engine API's Mount object (what docker.types.Mount builds)."""
        return {"Target": self.target, "Source": str(self.source), "Type": "bind", "ReadOnly": self.read_only}

    def to_cli(self) -> str:
        """`docker run --mount` text: CSV fields, quoted when a path holds a comma or quote."""
        fields = ["type=bind", f"source={self.source}", f"target={self.target}"] + (["readonly"] if self.read_only else [])
        return ",".join(_csv_field(f) for f in fields)


def _csv_field(text: str) -> str:
    if "," not in text and '"' not in text:
        return text
    return '"' + text.replace('"', '""') + '"'


@dataclass(frozen=True)
class ContainerSpec:
    """Everything `docker run` needs for one job."""

    image: str
    command: tuple[str, ...]
    mounts: tuple[Mount, ...]
    environment: dict[str, str] = field(hash=False)
    user: str  # uid:gid
    working_dir: str
    platform: str
    labels: dict[str, str] = field(hash=False, default_factory=dict)

    def to_docker_run_kwargs(self) -> dict:
        """Keyword arguments for the docker SDK's `containers.create` (or `containers.run`
        with detach=True)."""
        return {
            "image": self.image,
            "command": list(self.command),
            "mounts": [m.to_api() for m in self.mounts],
            "environment": dict(self.environment),
            "user": self.user,
            "working_dir": self.working_dir,
            "platform": self.platform,
            "labels": dict(self.labels),
            "network_mode": "none",
        }

    def to_cli(self) -> list[str]:
        """The equivalent `docker run` command line (for logs, and to rerun a job by hand)."""
        argv = ["docker", "run", "--rm", "--network", "none", "--platform", self.platform, "--user", self.user,
                "--workdir", self.working_dir]
        for key, value in self.labels.items():
            argv += ["--label", f"{key}={value}"]
        for mount in self.mounts:
            argv += ["--mount", mount.to_cli()]
        for key, value in self.environment.items():
            argv += ["--env", f"{key}={value}"]
        return [*argv, self.image, *self.command]


def container_path(host: Path) -> str:
    """Where a host folder appears in the container: the same path, unless that would hide
    part of the image; then under /host."""
    text = host.as_posix()
    if text == "/" or any(text == top or text.startswith(top + "/") for top in _IMAGE_FOLDERS):
        return _REMAPPED + (text if text != "/" else "")
    return text


def job_cache_dir(image: ImageSpec, variant_name: str) -> Path:
    """The host folder that is one job's kbuild cache in its containers (CMake work tree,
    build log): one per image and variant, so parallel containers share no locks, and a
    new image never reuses an old image's CMake cache."""
    return cache_dir("docker") / image.inputs_hash / variant_name


def default_compiler_cache_dir(enabled: bool | None = None) -> Path | None:
    """The host folder for the containers' ccache: $CCACHE_DIR, else the one kbuild's
    local builds use; None when turned off (`enabled` False, or KBUILD_COMPILER_CACHE=none
    without `enabled`). The images bring their own ccache, so the host needs none."""
    environment = read_environment()
    if enabled is False or (enabled is None and environment.compiler_cache == "none"):
        return None
    return environment.ccache_dir.absolute() if environment.ccache_dir else cache_dir("ccache")


def container_spec(
    job_variant_name: str,
    kernel_root: Path,
    out_dir: Path,
    compiler_cache_dir: Path | None,
    kbuild_package_dir: Path,
    image: ImageSpec,
    *,
    uid: int,
    gid: int,
    max_jobs: int | None,
    nvcc_threads: int | None,
    kbuild_cache_dir: Path | None = None,
    extra_args: tuple[str, ...] = (),
    cutlass: tuple[Path, ...] = (),
) -> ContainerSpec:
    """The container that builds variant `job_variant_name` of the kernel in `kernel_root`
    into `out_dir` (which gets `<variant>/`). `compiler_cache_dir` is the host's ccache
    folder (None: build without one); `kbuild_cache_dir` the job's kbuild cache (None:
    job_cache_dir). `max_jobs` and `nvcc_threads` become MAX_JOBS and NVCC_THREADS.
    `cutlass`: the host's ready CUTLASS release folders (cutlass_headers.ensure)."""
    kernel_root, out_dir = kernel_root.resolve(), out_dir.resolve()
    package = kbuild_package_dir.resolve()
    job_cache = (kbuild_cache_dir or job_cache_dir(image, job_variant_name)).resolve()
    # A checkout is mounted whole (its git state goes into provenance); an installed package
    # alone, never its site-packages, whose other packages (the host's torch) must not leak in.
    code = _source_folders(package.parent) if (package.parent / ".git").exists() else [package]
    read_only = [*_source_folders(kernel_root), *code]
    writable = [out_dir, job_cache] + ([compiler_cache_dir.resolve()] if compiler_cache_dir else [])
    mounts = _mounts(read_only, writable)
    # An emulated aarch64 CPU's registers, which torch reads at import (runners/docker_platform.py).
    mounts += tuple(Mount(target, source, True) for source, target in cpu_description(image.platform, job_cache / "emulated-cpu"))
    # The container's tools root is its job cache's (KBUILD_CACHE_DIR below); the mount
    # points are made here, as the caller, not by the engine as root.
    for folder in cutlass:
        target = job_cache / "tools" / "cutlass" / folder.name
        target.mkdir(parents=True, exist_ok=True)
        mounts += (Mount(container_path(target), folder.resolve(), True),)

    environment = {
        "HOME": HOME,
        # The caller's uid has no passwd entry in the image; getpass.getuser() reads $USER first.
        "USER": "kbuild",
        CACHE_DIR: container_path(job_cache),
        "PYTHONPATH": container_path(package.parent),
        "PYTHONDONTWRITEBYTECODE": "1",  # the code is read-only
        # git refuses a repository owned by another uid (the mount may be root's); kbuild
        # only reads it.
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "safe.directory",
        "GIT_CONFIG_VALUE_0": "*",
    }
    if compiler_cache_dir:
        environment |= {COMPILER_CACHE: "ccache", CCACHE_DIR: container_path(compiler_cache_dir.resolve())}
    if max_jobs is not None:
        environment[MAX_JOBS] = str(max_jobs)
    if nvcc_threads is not None:
        environment[NVCC_THREADS] = str(nvcc_threads)

    kernel = container_path(kernel_root)
    command = (
        f"{VENV}/bin/python", "-m", "kernel_builder.cli", "build", kernel,
        "--variant", job_variant_name,
        "--out", container_path(out_dir),
        "--env", VENV,
        "--no-create-env",
        "--compiler-cache" if compiler_cache_dir else "--no-compiler-cache",
        "--json",
        *extra_args,
    )
    return ContainerSpec(
        image=image.tag,
        command=command,
        mounts=mounts,
        environment=environment,
        user=f"{uid}:{gid}",
        working_dir=kernel,
        platform=image.platform,
        labels={"kbuild.variant": job_variant_name, "kbuild.kernel": str(kernel_root)},
    )


def _source_folders(kernel_root: Path) -> list[Path]:
    """The kernel's git work tree (and its git folder when elsewhere: a worktree's or a
    submodule's), else the kernel folder itself."""
    try:
        done = subprocess.run(
            ["git", "-C", str(kernel_root), "rev-parse", "--path-format=absolute", "--show-toplevel", "--git-common-dir"],
            capture_output=True, text=True, timeout=30, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return [kernel_root]
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) != 2:
        return [kernel_root]
    top, git_dir = Path(lines[0]).resolve(), Path(lines[1]).resolve()
    return [top] if _inside(git_dir, top) else [top, git_dir]


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _mounts(read_only: Iterable[Path], writable: Iterable[Path]) -> tuple[Mount, ...]:
    """One mount per folder, none inside another of the same kind (docker refuses two at
    one target), parents first; a writable folder inside a read-only one is mounted over it."""
    writable = _outermost(writable)
    read_only = [p for p in _outermost(read_only) if p not in writable]
    mounts = [Mount(container_path(p), p, True) for p in read_only] + [Mount(container_path(p), p, False) for p in writable]
    return tuple(sorted(mounts, key=lambda m: (m.target.count("/"), m.target)))


def _outermost(paths: Iterable[Path]) -> list[Path]:
    unique = sorted(set(paths), key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in unique:
        if not any(_inside(path, outer) for outer in kept):
            kept.append(path)
    return kept


# -- running ----------------------------------------------------------------------------
@dataclass(frozen=True)
class ContainerOutcome:
    exit_code: int
    report: list | dict | None  # the build's --json output; None when it printed none
    seconds: float


def run_container(
    spec: ContainerSpec,
    log_file: Path,
    on_line: Callable[[str], None] | None = None,
    client=None,
) -> ContainerOutcome:
    """Run `spec` to completion: its output (stdout and stderr) goes line by line into
    `log_file` (after the equivalent `docker run` line) and to `on_line`; the container
    is removed afterwards, also on Ctrl-C. `client` is a docker SDK client (None: connect,
    a KbuildError when no engine is reachable)."""
    client = client or docker_client()  # first: it explains a missing SDK
    from docker.errors import DockerException, ImageNotFound
    from requests import RequestException

    for mount in spec.mounts:
        if not mount.read_only:
            # Made by the caller: docker would create a missing source as root, and cannot
            # create a mount point inside a read-only mount.
            mount.source.mkdir(parents=True, exist_ok=True)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        container = client.containers.create(**spec.to_docker_run_kwargs())
    except ImageNotFound:
        raise KbuildError(f"build image {spec.image} is not built: run `kbuild docker build-images` for this variant") from None
    except (DockerException, RequestException) as e:
        raise KbuildError(f"docker could not create the build container from {spec.image}: {first_line(e)}") from None
    try:
        container.start()
        with log_file.open("w") as log:
            log.write(f"$ {shlex.join(spec.to_cli())}\n")
            for line in _lines(container.logs(stream=True, follow=True, stdout=True, stderr=True)):
                log.write(line + "\n")
                log.flush()
                if on_line:
                    on_line(line)
        status = container.wait()
        stdout = container.logs(stdout=True, stderr=False)
    except (DockerException, RequestException) as e:
        raise KbuildError(f"the build container of {spec.labels.get('kbuild.variant', spec.image)} failed to run: {first_line(e)}") from None
    finally:
        try:
            container.remove(force=True)  # also stops it when we are interrupted
        except (DockerException, RequestException):
            pass
    seconds = time.perf_counter() - start
    return ContainerOutcome(int(status.get("StatusCode", 1)), parse_report(stdout.decode(errors="replace")), seconds)


def _lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Whole lines from a stream of byte chunks that split lines (and characters) anywhere."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    for chunk in chunks:
        pending += decoder.decode(chunk)
        *lines, pending = pending.split("\n")
        yield from (line.rstrip("\r") for line in lines)
    pending += decoder.decode(b"", final=True)
    if pending:
        yield pending.rstrip("\r")


def parse_report(stdout: str) -> list | dict | None:
    """The JSON value `kbuild build --json` printed, ignoring any lines before it."""
    lines = stdout.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith(("[", "{")):
            try:
                return json.loads("\n".join(lines[i:]))
            except ValueError:
                continue
    return None


# -- one job ----------------------------------------------------------------------------
def build_in_container(
    variant: Variant,
    image: ImageSpec,
    client,
    spec_for: Callable[[bool], ContainerSpec],
    on_step: Callable[[str, Path | None], None] = lambda step, log: None,
) -> JobResult:
    """Build one variant in a container of `image` and report it as a local job would: the
    container's own `kbuild build --json` row, its log being the container's output.
    `spec_for(portable)` gives the container; portable is whether the image's base is
    manylinux_2_28, whose builds must not need a newer glibc (--strict-abi)."""
    start = time.perf_counter()
    log_file: Path | None = None
    try:
        spec = spec_for(image_glibc(client, image.tag) <= MANYLINUX_GLIBC)
        log_file = job_cache_dir(image, variant.name) / "container.log"
        on_step("container", log_file)
        outcome = run_container(spec, log_file, client=client)
    except KbuildError as e:
        return JobResult(variant.name, variant.backend, "failed", time.perf_counter() - start, e.message,
                         str(log_file) if log_file and log_file.exists() else None)
    report = outcome.report
    rows = report.get("jobs", []) if isinstance(report, dict) else report or []
    row = next((r for r in rows if r.get("variant") == variant.name), None)
    if row is None:
        detail = f"the build container exited with {outcome.exit_code} without a report for {variant.name}; see {log_file}"
        return JobResult(variant.name, variant.backend, "failed", outcome.seconds, detail, str(log_file))
    return replace(JobResult.from_json(row), seconds=outcome.seconds, log=str(log_file))


# -- the runner ---------------------------------------------------------------------------
_LOCAL_ONLY = "; drop it or use --runner local"
_IN_COMMAND = "the container's kbuild build command"
_OUTPUT_CACHE = "the host looks each variant's input id (asked of its image) up before its container, uploads after"


def forwarded_flags(options, parallelism: Parallelism, portable: bool) -> tuple[str, ...]:
    """The options of `kbuild build` (kernel_builder.pipeline.options.BuildOptions) that the
    container's own `kbuild build` takes as they are, with this job's share of the machine."""
    flags: list[str] = []
    if parallelism.jobs is not None:
        flags += ["--max-jobs", str(parallelism.jobs)]
    if parallelism.nvcc_threads is not None:
        flags += ["--nvcc-threads", str(parallelism.nvcc_threads)]
    if options.strict_abi or portable:
        flags.append("--strict-abi")
    if not options.import_check:
        flags.append("--no-import-check")
    if options.fail_fast:
        flags.append("--fail-fast")  # the container builds one variant: the host's scheduler stops the others
    return tuple(flags)


class DockerRunner(Runner):
    """One container per variant, from the variant's build image (built when missing)."""

    name = "docker"
    options = {
        "KERNEL_DIR": Honoured("mounted read-only at its own path; " + _IN_COMMAND),
        "--variant": Honoured("one container per variant: its --variant"),
        "--matrix": Honoured("one container per selected variant"),
        "--shard": Honoured("one container per selected variant"),
        "--variant-names": Honoured("one container per variant, named in that style"),
        "--out": Honoured("mounted read-write; the container's --out"),
        "--env": Refused("the containers build in their image's own environment" + _LOCAL_ONLY),
        "--create-env": Honoured("a variant whose build image is missing is built, or with --no-create-env skipped"),
        "--torch-index": Honoured("the image build's torch index (TORCH_INDEX_URL masked, the URL as a BuildKit secret)"),
        "--jobs": Honoured("the scheduler: containers at once"),
        "--max-jobs": Honoured("the container's --max-jobs (its share) and MAX_JOBS"),
        "--nvcc-threads": Honoured("the container's --nvcc-threads and NVCC_THREADS"),
        "--fail-fast": Honoured("the scheduler, and the container's --fail-fast"),
        "--runner": Honoured("the registry"),
        "--base-image": Honoured("the images' BASE_IMAGE"),
        "--strict-abi": Honoured("the container's --strict-abi (always given on a manylinux_2_28 base)"),
        "--import-check": Honoured("the container's --no-import-check"),
        "--compiler-cache": Honoured("the host's ccache folder mounted; the container's --compiler-cache or --no-compiler-cache"),
        "--compiler-cache-tool": Refused("the build images compile through their own ccache" + _LOCAL_ONLY),
        "--dist-scheduler": Refused("the containers have no network to reach a scheduler" + _LOCAL_ONLY),
        "--dist-token": Refused("the containers have no network to reach a scheduler" + _LOCAL_ONLY),
        "--dist-fallback-local": Refused("the containers have no network to reach a scheduler" + _LOCAL_ONLY),
        "--cuda-arch": Refused("it restricts a local build to this machine's GPU" + _LOCAL_ONLY),
        "--json": Honoured("kbuild's report, of each container's own --json row"),
        "--output-cache": Honoured(_OUTPUT_CACHE),
        "--output-cache-mode": Honoured(_OUTPUT_CACHE),
    }

    def compiler_cache(self, request: RunRequest) -> None:
        return None  # the images bring their own ccache; the host needs none

    def images(self, request: RunRequest) -> tuple[list[tuple[Variant, ImageSpec]], list[JobResult]]:
        """Each requested variant (default: every variant of the matrix the kernel admits on
        this machine's platform) with its build image; a skip for each that has none."""
        options = request.options
        variants = [v if isinstance(v, Variant) else Variant.parse(v) for v in request.requested]
        if not request.requested:
            here = "-".join(host_platform())
            variants = [v.with_style(request.style) for v in request.admitted() if v.platform in (here, None)]
        found, skips = [], []
        for variant in variants:
            try:
                found.append((variant, image_for(variant, base_image=options.base_image, torch_index=options.torch_index)))
            except KbuildError as e:
                skips.append(JobResult(variant.name, variant.backend, "skipped", detail=e.message))
        return found, skips

    def container(
        self, request: RunRequest, variant: Variant, image: ImageSpec, settings: BuildSettings, portable: bool,
        cutlass: tuple[Path, ...] = (),
    ) -> ContainerSpec:
        """The container that runs `variant`'s job."""
        options = request.options
        parallelism = settings.slots.for_job()
        return container_spec(
            variant.name, request.manifest.root, request.out, default_compiler_cache_dir(options.compiler_cache),
            KBUILD_PACKAGE_DIR, image, uid=os.getuid(), gid=os.getgid(), max_jobs=parallelism.jobs,
            nvcc_threads=parallelism.nvcc_threads, extra_args=forwarded_flags(options, parallelism, portable),
            cutlass=cutlass,
        )

    def cutlass(self, request: RunRequest, variant: Variant) -> tuple[Path, ...]:
        """The CUTLASS release folders the units of `variant`'s backend depend on, made on
        the host (the containers have no network). A release kbuild cannot provide raises
        its one-line BuildError."""
        depends = (d for unit in request.manifest.units_for(variant.backend) for d in unit.depends)
        return tuple(cutlass_headers.ensure(release, request.say) for release in cutlass_headers.wanted(depends))

    def tasks(self, request: RunRequest) -> tuple[list[Task], list[JobResult]]:
        input_files(request.manifest)  # as the local plan does: a file outside the repo fails before any image
        found, skips = self.images(request)
        headers: dict[str, tuple[Path, ...]] = {}
        for variant, _ in found:
            try:
                headers[variant.name] = self.cutlass(request, variant)
            except KbuildError as e:  # as in a local build: the variant fails, in one line
                skips.append(JobResult(variant.name, variant.backend, "failed", detail=e.message))
        found = [(v, i) for v, i in found if v.name in headers]
        if not found:
            return [], skips
        client = docker_client()
        options = request.options
        # Present images are kept; a build image is the docker runner's build environment.
        built, unbuilt = build_images([v for v, _ in found], client, base_image=options.base_image,
                                      torch_index=options.torch_index, build_missing=options.create_env, say=request.say)
        skipped = dict(unbuilt)
        skips += [JobResult(v.name, v.backend, "skipped", detail=skipped[v.name]) for v, _ in found if v.name in skipped]
        found = [(v, i) for v, i in found if v.name not in skipped]
        for item in built:
            glibc = image_glibc(client, item.image.tag)
            if glibc > MANYLINUX_GLIBC:
                request.say(f"{item.image.build_args['BASE_IMAGE']} has glibc {glibc[0]}.{glibc[1]}: its builds can "
                            f"meet {glibc_policy(glibc)}, not manylinux_2_28 (`kbuild check` says which each meets)")

        def run(variant: Variant, image: ImageSpec, settings: BuildSettings) -> JobResult:
            def build() -> JobResult:
                return build_in_container(
                    variant, image, client, lambda portable: self.container(request, variant, image, settings, portable, headers[variant.name]),
                    on_step=lambda step, log: settings.progress.step(variant.name, step, log),
                )

            if settings.output_cache is None:
                return build()

            def probe():  # the variant's input id, from a container of its image (docker_output_cache)
                settings.progress.step(variant.name, "output cache")
                spec = self.container(request, variant, image, settings, portable=False, cutlass=headers[variant.name])
                spec = replace(spec, command=probe_command(spec.command))
                return run_container(spec, job_cache_dir(image, variant.name) / "input-id.log", client=client).report

            return cached_build(settings.output_cache, variant, request.out, probe, build)

        tasks = [Task(v.name, v.backend, lambda settings, v=v, i=i: run(v, i, settings)) for v, i in found]
        return tasks, skips
