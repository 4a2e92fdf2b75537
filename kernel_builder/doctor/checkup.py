"""`kbuild doctor`: what this machine can build, and for the rest what to install.

The report asks the modules that decide, rather than judging anew: each backend's own
toolchain lookup and messages (kernel_builder.compile.backends), `kbuild variants`' verdict per
variant of the default matrix (host.judge), `kbuild plan`'s for a kernel (plan_assembly.assemble_plan),
the build environments (envs, envstore), the build tools and compiler cache a build would
use, the Docker engine of `--runner docker`, and the cores, memory and disk a build takes.

Example:
    >>> report = diagnose()
    >>> report.backend("cuda").version
    '13.0'
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from kernel_builder.compile.backends import backend_names, get_backend, tool_version
from kernel_builder.compile.backends.base import dotted, short_version
from kernel_builder.doctor.output_cache import OutputCacheFinding, output_cache_finding
from kernel_builder.runtime.system import host_platform
from kernel_builder.errors import KbuildError
from kernel_builder.formatting import human_size
from kernel_builder.variants import default_matrix

# Statuses of a backend: a variant of the default matrix builds here; only its toolchain is
# here (no variant fits it, e.g. an older ROCm); no toolchain at all.
OK, LIMITED, MISSING = "ok", "limited", "missing"

# What a first CUDA build takes on disk: a CUDA torch environment (torch 2.14.1 with its
# nvidia-* wheels is about 5.4 GB) plus the CMake work tree, the compiler cache and the
# output (a few GB for a multi-architecture kernel).
CUDA_ENV_DISK = 6 * 10**9
CUDA_BUILD_DISK = 4 * 10**9

# The engine's ping answers in milliseconds or not at all; the SDK's own timeout is 60 s.
DOCKER_TIMEOUT_S = 5.0

# -- findings -------------------------------------------------------------------------------
@dataclass(frozen=True)
class BackendFinding:
    """One backend: its compiler (path and version) or why there is none, and which
    variants of the default matrix for this platform build here."""

    backend: str
    status: str  # OK | LIMITED | MISSING
    tool: str
    path: str | None = None
    version: str | None = None  # short: "13.0", "12.2.0"
    version_line: str | None = None  # the tool's own first line of --version
    detail: str | None = None  # e.g. nvcc's architectures
    variants: tuple[str, ...] = ()  # what builds here
    reason: str | None = None  # why not (MISSING, LIMITED)
    install: str | None = None  # what to install (MISSING, LIMITED)
    device_check: bool = False  # LIMITED, but `kbuild build` compile-checks its device code
    fallback: str | None = None  # MISSING, LIMITED: another way it builds here (CUDA: NVIDIA's compiler wheels)

    @property
    def available(self) -> bool:
        return self.status == OK


@dataclass(frozen=True)
class ToolFinding:
    """A build tool every compiled variant needs (CMake, Ninja)."""

    name: str
    path: str | None
    version: str | None
    reason: str | None = None
    install: str | None = None

    @property
    def available(self) -> bool:
        return self.path is not None


@dataclass(frozen=True)
class EnvironmentFinding:
    """A build environment: the running interpreter (or --env) or a managed one."""

    name: str  # "this interpreter", "--env", or the managed key
    kind: str  # "interpreter" | "managed"
    python: str | None
    torch_version: str | None
    compute: str | None  # the compute tag: cpu, cu130, rocm71, xpu20260
    complete: bool = True
    size_bytes: int | None = None
    reason: str | None = None  # why it cannot build (no torch, incomplete)


@dataclass(frozen=True)
class DockerFinding:
    reachable: bool
    host: str
    client: str | None  # the docker CLI, if on PATH
    version: str | None = None  # the engine's
    reason: str | None = None
    install: str | None = None
    image_builder: str | None = None  # the BuildKit command images are built with
    image_builder_reason: str | None = None  # why images cannot be built


@dataclass(frozen=True)
class CompilerCacheFinding:
    tool: str | None  # ccache | sccache; None: builds compile without one
    path: str | None = None
    directory: str | None = None
    size_bytes: int | None = None
    reason: str | None = None
    install: str | None = None
    # sccache's shared remote cache (its SCCACHE_* variables), and whether it answers
    # (None: configured, not something kbuild can ask).
    remote: str | None = None
    remote_answers: bool | None = None
    remote_detail: str | None = None
    # KBUILD_DIST_SCHEDULER, and why it cannot be used (None: it answered).
    dist_scheduler: str | None = None
    dist_problem: str | None = None


@dataclass(frozen=True)
class ResourceFinding:
    cores: int
    memory_available: int | None  # bytes, None where the system does not say
    memory_per_compile: int
    parallel_compiles: int | None
    disk_path: str  # kbuild's cache folder: environments and work trees go there
    disk_free: int
    cuda_disk_needed: int  # a first CUDA build: its environment (unless made) and build
    shortfalls: tuple[str, ...] = ()


@dataclass(frozen=True)
class KernelFinding:
    """A kernel's backends as `kbuild build` would treat them, and its admitted variants
    for this platform (rows as `kbuild plan` prints them: host.variant_row)."""

    name: str
    root: str
    backends: tuple[dict, ...]
    variants: tuple[dict, ...]


@dataclass(frozen=True)
class DoctorReport:
    platform: str
    python: str
    backends: tuple[BackendFinding, ...]
    tools: tuple[ToolFinding, ...]
    environments: tuple[EnvironmentFinding, ...]
    docker: DockerFinding
    compiler_cache: CompilerCacheFinding
    resources: ResourceFinding
    kernel: KernelFinding | None = None
    output_cache: OutputCacheFinding | None = None
    platforms: tuple["PlatformFinding", ...] = ()

    def backend(self, name: str) -> BackendFinding:
        return next(b for b in self.backends if b.backend == name)

    def summary_line(self) -> str:
        def named(status: str) -> str:
            return ", ".join(b.backend for b in self.backends if b.status == status) or "none"

        checked = [b.backend for b in self.backends if b.device_check]
        unbuilt = [b.backend for b in self.backends if not b.available and not b.device_check]
        parts = [f"builds {named(OK)}"]
        if checked:
            parts.append(f"compile-checks {', '.join(checked)}")
        parts.append(f"cannot build {', '.join(unbuilt) or 'nothing'}")
        parts.append(f"docker {'reachable' if self.docker.reachable else 'unreachable'}")
        if self.kernel is not None:
            built = sum(r["buildable"] for r in self.kernel.variants)
            parts.append(f"{self.kernel.name}: {built} of {len(self.kernel.variants)} variants build here")
        if self.resources.shortfalls:
            parts.append(f"{len(self.resources.shortfalls)} resource warning(s)")
        return "; ".join(parts)

    def to_json(self) -> dict:
        data = asdict(self)
        for finding, row in zip(self.backends, data["backends"]):
            row["available"] = finding.available
        for finding, row in zip(self.tools, data["tools"]):
            row["available"] = finding.available
        data["summary"] = self.summary_line()
        return data


# -- backends -------------------------------------------------------------------------------
def toolchain(backend: str) -> BackendFinding:
    """The backend's compiler, found the way the backend finds it, or the backend's own
    reason it is missing (status MISSING). Status OK here means only "found"."""
    found = get_backend(backend).toolchain()
    if found.missing is not None:
        fallback = get_backend(backend).fallback()  # may ask pip: the reason, asked again, then knows the size too
        return BackendFinding(backend, MISSING, found.tool, reason=get_backend(backend).toolchain().missing,
                              install=install_hint(backend), fallback=fallback)
    return BackendFinding(backend, OK, found.tool, found.path, found.version, found.version_line, found.detail)


def _with(finding: BackendFinding, **fields) -> BackendFinding:
    return BackendFinding(**{**asdict(finding), **fields})


def install_hint(backend: str) -> str:
    """What to install for `backend`, naming the toolkit releases the default matrix
    builds on this platform where the toolkit must match torch's (variants with a
    backend version: not cpu's or metal's)."""
    here = "-".join(host_platform())
    versions = sorted({v.backend_version for v in default_matrix().for_backend(backend) if v.platform == here and v.backend_version})
    hint = get_backend(backend).install
    if versions:
        hint += f" ({', '.join(dotted(v) for v in versions)} for this platform)"
    return hint


def judge_backend(backend: str, chooser) -> BackendFinding:
    """The backend's toolchain, and which variants of the default matrix for this platform
    build here (`kbuild variants`); a toolchain that fits none of them is LIMITED, with
    the reasons of the variants."""
    from kernel_builder.pipeline.host import judge

    found = toolchain(backend)
    if found.status == MISSING:
        return found
    here = "-".join(host_platform())
    rows = [judge(None, v, chooser) for v in default_matrix().for_backend(backend) if v.platform == here]
    buildable = tuple(r["variant"] for r in rows if r["buildable"])
    if buildable:
        return _with(found, variants=buildable)
    # The newest variant's reason: the others differ only in the version they name, and
    # the install hint lists every version the matrix wants.
    reason = rows[-1]["reason"] if rows else f"the default matrix has no {backend} variant for {here}"
    check = get_backend(backend).device_check_possible()
    return _with(found, status=LIMITED, reason=reason, install=install_hint(backend), device_check=check,
                 fallback=get_backend(backend).fallback())


# -- other platforms -------------------------------------------------------------------------
@dataclass(frozen=True)
class PlatformFinding:
    """Another Linux platform of the default matrix: the route its CPU variants take here
    (kernel_builder.environments.cross_target), and what each part of it lacks."""

    platform: str
    route: str  # "cross (...)" or "no route from this machine"
    buildable: bool  # the cross compiler is here
    compiler: str | None = None
    emulator: str | None = None
    missing: tuple[str, ...] = ()  # one line each: the compiler, the emulator, the emulated Python
    install: str | None = None  # the apt command for what is missing


def other_platforms() -> tuple[PlatformFinding, ...]:
    from kernel_builder.environments import cross_target, emulation_root
    from kernel_builder.environments.store import envs_root

    here = "-".join(host_platform())
    found = []
    for name in sorted({v.platform for v in default_matrix().variants if v.os == "linux" and v.platform != here}):
        target = cross_target.target_for(name)
        if target is None:
            found.append(PlatformFinding(name, cross_target.describe_route(name), False))
            continue
        missing = tuple(r for r in (cross_target.compiler_missing(target), emulation_root.missing_reason(target, envs_root())) if r)
        packages = tuple(p for p, tool in ((target.compiler_package, cross_target.cross_compiler(target)),
                                           (target.emulator_package, cross_target.emulator(target))) if tool is None)
        found.append(PlatformFinding(
            name, cross_target.describe_route(name), cross_target.cross_compiler(target) is not None,
            cross_target.cross_compiler(target), cross_target.emulator(target), missing,
            target.apt_command(packages) if packages else None,
        ))
    return tuple(found)


# -- build tools, environments, Docker, compiler cache --------------------------------------
def build_tool(name: str) -> ToolFinding:
    """CMake or Ninja as the build finds them (the running environment's wheels first)."""
    from kernel_builder.compile.cmake import _tool

    try:
        path = _tool(name)
    except KbuildError as e:
        return ToolFinding(name, None, None, e.message, f"pip install {name}")
    return ToolFinding(name, path, short_version(tool_version(path)))


def environments(chooser) -> tuple[EnvironmentFinding, ...]:
    """The primary environment (or why the running interpreter has none) and the managed ones."""
    from kernel_builder.environments.probe import current_env
    from kernel_builder.environments.store import compute_tag, list_envs

    found = []
    primary = chooser.primary
    if primary is not None:
        name = "--env" if chooser.explicit else "this interpreter"
        found.append(EnvironmentFinding(name, "interpreter", primary.python, primary.torch_version, compute_tag(primary)))
    else:
        reason = "the running interpreter has no torch; every variant needs a managed environment"
        try:
            current_env()
        except KbuildError as e:  # its message says what to install
            reason = e.message
        found.append(EnvironmentFinding("this interpreter", "interpreter", sys.executable, None, None, False, reason=reason))
    for e in list_envs():
        found.append(EnvironmentFinding(
            e.key, "managed", str(e.path / "bin" / "python"), e.torch_version, e.spec.compute if e.spec else None,
            e.complete, e.size_bytes, None if e.complete else "incomplete (an interrupted creation; `kbuild env prune` removes it)",
        ))
    return tuple(found)


def docker_engine(timeout: float = DOCKER_TIMEOUT_S) -> DockerFinding:
    """Whether `--runner docker` would find an engine: docker_client()'s own verdict, given
    at most `timeout` seconds (an unanswering DOCKER_HOST would hold the SDK for 60)."""
    from kernel_builder.runners.docker_engine import docker_client, engine_address

    host = engine_address()
    outcome: dict = {}

    def probe() -> None:
        try:
            client = docker_client()
            outcome["version"] = client.version().get("Version")
            client.close()
        except KbuildError as e:
            outcome["reason"] = e.message
        except Exception as e:  # noqa: BLE001 -- the engine answered the ping, then failed: still not usable
            outcome["reason"] = f"the Docker engine at {host} failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}"

    worker = threading.Thread(target=probe, daemon=True)  # daemon: an abandoned probe never holds the exit
    worker.start()
    worker.join(timeout)
    client = shutil.which("docker")
    install = "Docker Engine, running (only `kbuild build --runner docker` and `kbuild docker build-images` need it)"
    if worker.is_alive():
        reason = f"no Docker engine reachable (DOCKER_HOST={host}): no answer within {timeout:g} s"
        return DockerFinding(False, host, client, reason=reason, install=install)
    if "reason" in outcome:
        return DockerFinding(False, host, client, reason=outcome["reason"], install=install)
    from kernel_builder.runners.image_builder import buildkit_cli

    try:
        builder, builder_reason = " ".join(buildkit_cli().argv), None
    except KbuildError as e:
        builder, builder_reason = None, e.message
    return DockerFinding(True, host, client, version=outcome.get("version"), image_builder=builder,
                         image_builder_reason=builder_reason)


def compiler_cache() -> CompilerCacheFinding:
    """The compiler cache builds would launch compiles through (find_compiler_cache)."""
    from kernel_builder.compile.compiler_cache import CacheRequest, find_compiler_cache
    from kernel_builder.compile.remote_cache import probe, remote_backend
    from kernel_builder.redaction import mask_credentials
    from kernel_builder.settings import read_environment

    install = "ccache (apt-get install ccache), for faster rebuilds across variants"
    scheduler = read_environment().dist_scheduler
    try:
        # A scheduler that does not answer is a finding of its own, not a missing cache.
        cache = find_compiler_cache(CacheRequest(dist_fallback_local=True) if scheduler else None)
    except KbuildError as e:
        return CompilerCacheFinding(None, reason=e.message, install=install)
    if cache is None:
        return CompilerCacheFinding(None, reason="no ccache or sccache on PATH (or KBUILD_COMPILER_CACHE=none); builds compile uncached", install=install)
    backend = remote_backend() if cache.tool == "sccache" else None
    answers, detail = probe(backend) if backend else (None, None)
    return CompilerCacheFinding(
        cache.tool, cache.path, str(cache.directory), _ccache_size(cache),
        remote=backend.describe() if backend else None, remote_answers=answers, remote_detail=detail,
        dist_scheduler=mask_credentials(scheduler) if scheduler and cache.tool == "sccache" else None,
        dist_problem=cache.dist_problem or None,
    )


def _ccache_size(cache) -> int | None:
    """The cache's size as ccache's statistics keep it (no walk of the folder); None for
    sccache or when ccache does not say."""
    if cache.tool != "ccache":
        return None
    try:
        out = subprocess.run(
            [cache.path, "--print-stats"], capture_output=True, text=True, timeout=10, check=False,
            env=dict(os.environ, CCACHE_DIR=str(cache.directory)),
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"^cache_size_kibibyte\s+(\d+)", out, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


# -- resources ------------------------------------------------------------------------------
def resources(envs: tuple[EnvironmentFinding, ...] = ()) -> ResourceFinding:
    """Cores, free memory against one compile's share, free disk where kbuild keeps its
    environments and work trees against a first CUDA build."""
    from kernel_builder.paths import cache_dir
    from kernel_builder.environments.store import envs_root
    from kernel_builder.compile.parallelism import (
        MEMORY_PER_COMPILE,
        available_cores,
        available_memory,
        compile_parallelism,
    )

    shortfalls = []
    cores, memory = available_cores(), available_memory()
    try:
        jobs = compile_parallelism().jobs
    except KbuildError as e:  # MAX_JOBS set to nonsense
        jobs = None
        shortfalls.append(e.message)
    if memory is not None and memory < MEMORY_PER_COMPILE:
        shortfalls.append(
            f"memory: {_gib(memory)} free, less than one compile's {_gib(MEMORY_PER_COMPILE)}; "
            "compiles may swap or be killed (close other programs)"
        )
    folder = cache_dir()
    free = shutil.disk_usage(folder).free
    has_cuda_env = any((e.compute or "").startswith("cu") and e.complete for e in envs)
    needed = CUDA_BUILD_DISK + (0 if has_cuda_env else CUDA_ENV_DISK)
    if free < needed:
        what = "a build" if has_cuda_env else "a CUDA environment and a build"
        shortfalls.append(
            f"disk: {human_size(free)} free in {folder}, a first CUDA build needs about {human_size(needed)} ({what}); "
            "free space (`kbuild env prune`) or set KBUILD_CACHE_DIR / KBUILD_ENVS_DIR elsewhere"
        )
    venvs = envs_root()
    if venvs.stat().st_dev != folder.stat().st_dev and not has_cuda_env:
        env_free = shutil.disk_usage(venvs).free
        if env_free < CUDA_ENV_DISK:
            shortfalls.append(f"disk: {human_size(env_free)} free in {venvs}, a CUDA environment needs about {human_size(CUDA_ENV_DISK)}")
    return ResourceFinding(cores, memory, MEMORY_PER_COMPILE, jobs, str(folder), free, needed, tuple(shortfalls))




def _gib(size: int) -> str:
    return f"{size / 2**30:.1f} GiB"


# -- a kernel -------------------------------------------------------------------------------
def kernel(kernel_dir: Path, chooser) -> KernelFinding:
    """What `kbuild build KERNEL_DIR` would do per backend, and each variant the kernel
    admits for this platform, built here or why not (`kbuild plan --matrix all`)."""
    from kernel_builder.kernel.manifest import load_manifest
    from kernel_builder.pipeline.plan_assembly import assemble_plan
    from kernel_builder.pipeline.selection import admitted

    manifest = load_manifest(kernel_dir)
    here = "-".join(host_platform())
    inputs = assemble_plan(manifest, chooser=chooser)
    backends = inputs.rows()
    mine = tuple(v for v in admitted(manifest).variants if v.platform in (None, here))
    variants = inputs.selecting(mine).rows() if mine else []
    return KernelFinding(manifest.name, str(manifest.root), tuple(backends), tuple(variants))


def diagnose(kernel_dir: Path | None = None, env_path: Path | None = None) -> DoctorReport:
    """The whole report. Only a bad KERNEL_DIR (or --env) raises; the rest is reported."""
    from kernel_builder.environments.choice import EnvChooser

    chooser = EnvChooser.from_options(env_path)
    found_kernel = kernel(kernel_dir, chooser) if kernel_dir is not None else None
    envs = environments(chooser)
    return DoctorReport(
        platform="-".join(host_platform()),
        python=f"{platform.python_version()} ({sys.executable})",
        backends=tuple(judge_backend(b, chooser) for b in backend_names()),
        tools=(build_tool("cmake"), build_tool("ninja")),
        environments=envs,
        docker=docker_engine(),
        compiler_cache=compiler_cache(),
        resources=resources(envs),
        kernel=found_kernel,
        output_cache=output_cache_finding(),
        platforms=other_platforms(),
    )
