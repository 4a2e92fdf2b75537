"""CUDA: nvcc against a CUDA build of torch.

The architectures are the unit's `cuda-capabilities` (or the defaults of its CUDA
version, FORMATS.md) intersected with what the installed nvcc can compile
(`nvcc --list-gpu-arch`); each becomes a `-gencode` for SASS, and `X.Y+PTX` adds PTX.
The variant is named after the CUDA version torch was built with; nvcc must be that
release. A system nvcc of it is preferred; else the NVIDIA compiler wheels of it in the
build environment (environments/cuda_wheels.py), which kbuild installs into a managed one.
A variant for another architecture (aarch64-linux on x86_64) is cross-compiled: this
machine's nvcc with the cross compiler as its host compiler, the target's CUDA headers and
libraries from NVIDIA's wheels for it (environments/cuda_cross.py)."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from kernel_builder.compile.backends.base import Backend, Toolchain, Unavailable, dotted, tool_version
from kernel_builder.compile.backends.common import (
    CXX_SUFFIXES,
    binding_group,
    compilers,
    cxx_compiler,
    cxx_standard,
    env_target,
    host_default,
    not_this_torch,
    torch_spec,
    unit_group,
)
from kernel_builder.compile.cmake import CompileSpec
from kernel_builder.environments import cuda_cross, cuda_wheels, cutlass_headers, download_cost
from kernel_builder.environments.cross_target import CrossTarget, compiler_missing, describe_route, target_for
from kernel_builder.environments.probe import BuildEnv
from kernel_builder.environments.store import EnvSpec, creation_cost, find_env, is_managed_env, pypi_flavour
from kernel_builder.errors import BuildError, KbuildError, UsageError
from kernel_builder.kernel.manifest import KernelUnit, Manifest
from kernel_builder.runtime.system import host_platform
from kernel_builder.variants import Variant, parse_version

CUDA_SUFFIXES = (".cu",)

# Where the CUDA toolkit installs itself: looked in last, as torch's cpp_extension does, so an
# nvcc that is neither on PATH nor named by $CUDA_HOME is still found.
STANDARD_CUDA_HOME = Path("/usr/local/cuda")

NVCC_MISSING = (
    f"nvcc not found in $CUDA_HOME/bin, on PATH or in {STANDARD_CUDA_HOME}/bin "
    "(install the CUDA toolkit, or set CUDA_HOME to its folder)"
)


@dataclass(frozen=True)
class WheelRoute:
    """The CUDA variant that builds here without a system toolkit, with NVIDIA's compiler
    wheels in its managed environment, and what that downloads (None: not known yet)."""

    variant: Variant
    cost: download_cost.DownloadCost | None

    def command(self) -> str:
        return f"kbuild build --variant {self.variant.name}"

    def size(self) -> str:
        """'about 3.1 GB, once', 'downloaded once' while the size is unknown, or 'already
        downloaded' where the environment and its wheels are there."""
        if self.cost is None or self.cost.size_text() == "size unknown":
            return "downloaded once"
        if not self.cost.downloads:
            return "already downloaded"
        return f"{self.cost.size_text()}, once"

    def hint(self) -> str:
        """What a message that says nvcc is missing adds."""
        return f"; or build with NVIDIA's compiler wheels ({self.size()}): {self.command()}"


def wheel_route(manifest: Manifest | None = None, cached_only: bool = True) -> WheelRoute | None:
    """The newest torch of the default matrix for this platform (within the kernel's bounds)
    that ships a CUDA release NVIDIA publishes compiler wheels of; of one torch's releases,
    the one PyPI serves. Its cost comes from pip's dry runs: with `cached_only`
    (messages, which must stay cheap) only those already made."""
    candidates = [
        variant for cuda in cuda_wheels.WHEEL_RELEASES
        if cuda_bounds_reason(manifest, cuda) is None and (variant := host_default(manifest, "cuda", cuda)) is not None
    ]
    if not candidates:
        return None

    def preference(variant: Variant) -> tuple:
        return variant.torch, pypi_flavour(variant.torch) == variant.compute, variant.backend_version

    variant = max(candidates, key=preference)
    return WheelRoute(variant, _route_cost(variant, cached_only))


def _route_cost(variant: Variant, cached_only: bool) -> download_cost.DownloadCost | None:
    """The environment's torch (unless made) plus the compiler wheels (unless there)."""
    cuda = variant.backend_version
    assert cuda is not None
    spec = EnvSpec.for_variant(variant)
    env = find_env(spec)
    if env is not None and cuda_wheels.wheel_nvcc(env, cuda):
        return download_cost.DownloadCost(())
    wheels = cuda_wheels.wheels_cost(cuda, cached_only)
    if wheels is None or env is not None:
        return wheels
    torch = creation_cost(spec, cached_only=cached_only)
    return None if torch is None else torch + wheels


def nvcc_missing(manifest: Manifest | None = None) -> str:
    """NVCC_MISSING, with the variant that builds with NVIDIA's wheels instead."""
    route = wheel_route(manifest)
    return NVCC_MISSING + (route.hint() if route else "")


def _wheels_hint(cuda: tuple[int, int]) -> str:
    """How a user's own environment gets nvcc from wheels, where wheels exist."""
    try:
        wanted = " ".join(cuda_wheels.requirements(cuda))
    except KbuildError:
        return ""
    return f"; or pip install {wanted} into the build environment"

# Default capabilities by CUDA version (FORMATS.md): the newest gets +PTX so that
# GPUs newer than the build still run the kernel through the driver's JIT.
_DEFAULT_CAPABILITIES: tuple[tuple[tuple[int, int], tuple[str, ...]], ...] = (
    ((13, 0), ("7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")),
    # 10.3 (B300) and 12.1 (GB10) are valid from CUDA 12.9 (kernels#783)
    ((12, 9), ("7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.1", "10.3", "12.0", "12.1")),
    ((12, 8), ("7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.1", "12.0")),
    ((0, 0), ("7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0")),
)

# kernel-builder's nvcc flags (its get_torch_gpu_compiler_flags): torch's COMMON_NVCC_FLAGS
# with, for CUDA >= 11.8 (every toolkit kbuild builds with), -DENABLE_FP8 added and torch's
# -D__CUDA_NO_HALF_OPERATORS__, _HALF_CONVERSIONS__, _BFLOAT16_CONVERSIONS__ and
# _HALF2_OPERATORS__ removed: kernels-community relies on cuda_fp16.h's own half<->float
# conversions (punica-sgmv, nvfp4-gemm fail to compile without them).
NVCC_FLAGS = (
    "-O3",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
    "-DENABLE_FP8",
)


def nvcc_for(cuda: tuple[int, int] | None, env: BuildEnv | None) -> str | None:
    """The nvcc that builds CUDA `cuda` with `env`: the system one when it is that release,
    else the one from NVIDIA's wheels in `env`, else the system one (whose release the
    caller reports)."""
    system = nvcc_path()
    if system and (cuda is None or nvcc_version(system) == cuda):
        return system
    wheel = cuda_wheels.wheel_nvcc(env, cuda) if env is not None and cuda is not None else None
    return wheel or system


def _wheels_would_serve(cuda: tuple[int, int], managed: bool) -> bool:
    """A build would install the wheels of `cuda` into its environment (a managed one)."""
    return managed and cuda in cuda_wheels.WHEEL_RELEASES


def describe_toolkit(cuda: tuple[int, int]) -> str:
    """Which nvcc builds CUDA `cuda` here, for `kbuild variants` and `kbuild doctor`."""
    system = nvcc_path()
    if system and nvcc_version(system) == cuda:
        return f"nvcc {cuda[0]}.{cuda[1]} at {system}"
    return f"nvcc {cuda[0]}.{cuda[1]} from NVIDIA's wheels in the managed environment (installed on first build)"


def nvcc_path() -> str | None:
    """nvcc from $CUDA_HOME (or $CUDA_PATH), else PATH, else the standard install folder."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    standard = STANDARD_CUDA_HOME / "bin" / "nvcc"
    return shutil.which("nvcc") or (str(standard) if standard.is_file() else None)


@functools.cache
def nvcc_version(nvcc: str) -> tuple[int, int] | None:
    """(major, minor) from `nvcc --version` ("... release 13.0, V13.0.88")."""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"release (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


@functools.cache
def nvcc_architectures(nvcc: str) -> frozenset[str]:
    """The virtual architectures nvcc compiles for, as capabilities: {"7.5", "8.0", ...}."""
    try:
        out = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    return frozenset(_capability(m) for m in re.findall(r"compute_(\d+)", out))


def _capability(digits: str) -> str:
    """"80" -> "8.0", "121" -> "12.1"."""
    return f"{int(digits[:-1])}.{digits[-1]}"


def _digits(capability: str) -> str:
    """"9.0a" -> "90a"."""
    major, minor = capability.split(".")
    return f"{major}{minor}"


def default_capabilities(cuda: tuple[int, int]) -> tuple[str, ...]:
    for since, caps in _DEFAULT_CAPABILITIES:
        if cuda >= since:
            return caps[:-1] + (caps[-1] + "+PTX",)
    raise AssertionError("the table ends with a catch-all")


def _base(capability: str) -> str:
    """"9.0a+PTX" -> "9.0": what `--list-gpu-arch` lists."""
    return re.sub(r"[a-z]$", "", capability.removesuffix("+PTX"))


def effective_capabilities(
    unit: KernelUnit, cuda: tuple[int, int], supported: frozenset[str], only: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """The unit's capabilities (or the defaults) that this nvcc can compile, in order.
    `only` (a build's --cuda-arch) replaces them with those architectures, keeping the unit's
    own spelling of one it lists (9.0a: its code may need the arch-specific features), never
    +PTX (a development build runs on the GPU it was compiled for). A unit that lists only
    arch-specific capabilities (10.0a), none of them among `only`, keeps its list: that code
    uses one GPU's own instructions (sage-attention's FP4 unit) and compiles for no other."""
    wanted = unit.cuda_capabilities or default_capabilities(cuda)
    if only and not _only_other_specific_archs(unit.cuda_capabilities, only):
        return tuple(restricted(wanted, only, cuda, supported))
    kept = tuple(c for c in wanted if _base(c) in supported)
    if not kept:
        have = ", ".join(sorted(supported, key=parse_version)) or "none"
        raise BuildError(
            f"[kernel.{unit.name}] cuda-capabilities {', '.join(wanted)}: nvcc {cuda[0]}.{cuda[1]} supports "
            f"none of them (it compiles for {have}); list capabilities this CUDA supports"
        )
    return kept


def _only_other_specific_archs(listed: tuple[str, ...] | None, only: tuple[str, ...]) -> bool:
    """Whether every capability `listed` is arch-specific (9.0a, 10.0f) and none is one of `only`
    (never for a unit that lists none: it takes the defaults)."""
    specific = [c.removesuffix("+PTX") for c in listed or ()]
    return bool(specific) and all(c != _base(c) for c in specific) and not {_base(c) for c in specific} & {_base(a) for a in only}


def restricted(wanted: tuple[str, ...], only: tuple[str, ...], cuda: tuple[int, int], supported: frozenset[str]):
    """Each of `only`, as `wanted` spells it where it lists that architecture."""
    for arch in only:
        if _base(arch) not in supported:
            raise UsageError(unsupported_arch(arch, cuda, supported))
        listed = [c.removesuffix("+PTX") for c in wanted if _base(c) == _base(arch)]
        yield listed[0] if listed and arch == _base(arch) else arch


def unsupported_arch(arch: str, cuda: tuple[int, int] | None, supported: frozenset[str]) -> str:
    """One line: --cuda-arch `arch` is not one this nvcc compiles for."""
    have = sorted(supported, key=parse_version)
    span = f"{have[0]} to {have[-1]}" if have else "nothing"
    release = f" {cuda[0]}.{cuda[1]}" if cuda else ""
    return f"--cuda-arch {arch}: nvcc{release} cannot compile for it (it compiles for {span}); name one of those"


def gencode_flags(capabilities: tuple[str, ...]) -> tuple[str, ...]:
    """`-gencode` per capability: SASS for each, plus PTX for those marked +PTX."""
    flags = []
    for cap in capabilities:
        digits = _digits(cap.removesuffix("+PTX"))
        flags.append(f"-gencode=arch=compute_{digits},code=sm_{digits}")
        if cap.endswith("+PTX"):
            flags.append(f"-gencode=arch=compute_{digits},code=compute_{digits}")
    return tuple(flags)


def units_for_version(manifest: Manifest, cuda: tuple[int, int]) -> tuple[KernelUnit, ...]:
    """The cuda units this CUDA version builds: `cuda-minver` excludes units from older ones."""
    return tuple(
        u for u in manifest.units_for("cuda") if u.cuda_minver is None or cuda >= parse_version(u.cuda_minver)
    )


def cutlass_includes(manifest: Manifest, cuda: tuple[int, int], say=lambda line: None) -> tuple[str, ...]:
    """The include folders of every CUTLASS release the units CUDA `cuda` builds depend on,
    fetched first if need be (environments/cutlass_headers.py): a release kbuild cannot provide
    fails the job here, before anything compiles."""
    depends = [d for u in units_for_version(manifest, cuda) for d in u.depends]
    return tuple(d for release in cutlass_headers.wanted(depends) for d in cutlass_headers.include_dirs(release, say))


def cuda_bounds_reason(manifest: Manifest | None, cuda: tuple[int, int]) -> str | None:
    """Why the kernel's `[general.cuda] minver/maxver` exclude this CUDA version, or None."""
    return manifest.toolkit_reason("cuda", cuda) if manifest else None


@functools.cache
def nvcc_include_dirs(nvcc: str) -> tuple[str, ...]:
    """The include folders nvcc itself passes (`--dryrun` shows them), which also finds the
    toolkit when `nvcc` on PATH is a wrapper script."""
    try:
        out = subprocess.run(
            [nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
            capture_output=True, text=True, timeout=60, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ()
    lines = [line for line in (out.stdout + out.stderr).splitlines() if "INCLUDES=" in line]
    found = re.findall(r'"?(?:-I|-isystem"?\s+"?)([^"\s]+)', " ".join(lines))
    return tuple(dict.fromkeys(str(Path(p).resolve()) for p in found if Path(p).is_dir()))


def toolkit_root(nvcc: str) -> Path | None:
    """The CUDA toolkit's folder (holding bin/nvcc) that `nvcc`'s headers are in, also when
    `nvcc` on PATH is a wrapper script elsewhere; None when it cannot tell."""
    for include in nvcc_include_dirs(nvcc):
        for folder in Path(include).parents:
            if (folder / "bin" / "nvcc").is_file():
                return folder
    return None


def cuda_include_dirs(nvcc: str, wheels: Path) -> tuple[str, ...]:
    """The toolkit's headers, for .cpp torch glue that the host compiler builds (nvcc adds
    them itself), then the headers of the CUDA libraries torch ships as wheels (cuBLAS,
    cuSPARSE, ...) installed in `wheels`, which a plain toolkit may lack but
    ATen/cuda/CUDAContext.h needs."""
    libraries = tuple(str(p) for p in sorted((wheels / "nvidia").glob("*/include")) if p.is_dir())
    return nvcc_include_dirs(nvcc) + libraries


class CudaBackend(Backend):
    name = "cuda"
    macro = "CUDA_KERNEL"
    tool = "nvcc"
    install = "the CUDA toolkit (nvcc) of a CUDA release torch ships"
    cross_compiles = True

    def toolkit_wheels(self, version: tuple[int, int]) -> tuple[str, ...]:
        return tuple(cuda_wheels.requirements(version))

    def toolkit_note(self, variant: Variant) -> str | None:
        if variant.backend_version is None:
            return None
        cuda = variant.backend_version
        if target_for(variant.platform) is None:
            return describe_toolkit(cuda)
        env = find_env(EnvSpec.for_variant(variant))
        return (f"{describe_route(variant.platform)}; {describe_toolkit(cuda)} with NVIDIA's "
                f"{variant.arch} CUDA {cuda[0]}.{cuda[1]} wheels ({cuda_cross.describe_cost(env, cuda)})")

    def _cross_reason(self, manifest: Manifest | None, cuda: tuple[int, int], target: CrossTarget) -> str | None:
        """Why CUDA `cuda` cannot be cross-built for `target` here: the cross compiler, and
        this machine's nvcc of that release, which compiles the device code."""
        missing = compiler_missing(target)
        if missing:
            return missing
        nvcc = nvcc_path()
        have = nvcc_version(nvcc) if nvcc else None
        if have != cuda:
            return cuda_cross.host_nvcc_missing(cuda, target, have)
        return cuda_bounds_reason(manifest, cuda)

    def _toolchain_reason(
        self, manifest: Manifest | None, cuda: tuple[int, int], env: BuildEnv | None, managed: bool
    ) -> str | None:
        """Why CUDA `cuda` cannot be built with `env` (None: in a managed one, maybe yet to
        be made); `managed` says kbuild may install nvcc's wheels into it."""
        nvcc = nvcc_for(cuda, env)
        have = nvcc_version(nvcc) if nvcc else None
        if have != cuda and _wheels_would_serve(cuda, managed):
            return cuda_bounds_reason(manifest, cuda)  # the build installs nvcc from wheels
        if nvcc is None:
            return nvcc_missing(manifest) + _wheels_hint(cuda)
        if have is None:
            return f"{nvcc} --version did not report a CUDA release"
        # Same release as torch's CUDA: torch's CUDA headers (nvidia wheels) and nvcc must
        # agree, and the variant name promises that release to the loader.
        if have != cuda:
            return (
                f"nvcc is CUDA {have[0]}.{have[1]} but the variant needs CUDA {cuda[0]}.{cuda[1]}; "
                "nvcc must be the variant's CUDA release" + _wheels_hint(cuda)
            )
        return cuda_bounds_reason(manifest, cuda)

    def target(self, manifest: Manifest | None, env: BuildEnv) -> Variant | Unavailable:
        if not env.cuda:
            return not_this_torch(self.name, env, "CUDA", "a CUDA torch (e.g. torch==2.14.1)")
        cuda = parse_version(env.cuda)
        reason = self._toolchain_reason(manifest, cuda, env, is_managed_env(env))
        if reason:
            return Unavailable(self.name, reason)
        return env_target(manifest, self.name, env, cuda)

    def variant_reason(self, manifest: Manifest | None, variant: Variant, env: BuildEnv | None) -> str | None:
        assert variant.backend_version is not None
        cross = target_for(variant.platform)
        if cross is not None:
            return self._cross_reason(manifest, variant.backend_version, cross)
        # Called for variants that a managed environment builds, not `env` (the primary).
        return self._toolchain_reason(manifest, variant.backend_version, None, managed=True)

    def default_variant(self, manifest: Manifest | None) -> Variant | Unavailable:
        """The CUDA variant to build here when the build environment is not a CUDA torch:
        nvcc's CUDA version, with the newest torch of the default matrix that ships it (or
        the stable ABI that build.toml names)."""
        nvcc = nvcc_path()
        have = nvcc_version(nvcc) if nvcc else None
        if have is None:
            return Unavailable(self.name, nvcc_missing(manifest))
        reason = cuda_bounds_reason(manifest, have)
        if reason:
            return Unavailable(self.name, reason)
        variant = host_default(manifest, self.name, have)
        if variant is None:
            return Unavailable(
                self.name,
                f"no torch release in the default matrix ships CUDA {have[0]}.{have[1]} for "
                f"{'-'.join(host_platform())} within the kernel's [torch] bounds",
            )
        return variant

    def toolchain(self) -> Toolchain:
        path = nvcc_path()
        version = nvcc_version(path) if path else None
        if version is None:
            return Toolchain(self.tool, missing=f"{path} --version did not report a CUDA release" if path else nvcc_missing())
        archs = sorted(nvcc_architectures(path), key=parse_version)
        detail = f"compiles for compute capability {archs[0]} to {archs[-1]}" if archs else None
        # nvcc's first line names the driver, not the release: the version says it.
        return Toolchain(self.tool, path, dotted(version), detail=detail)

    def fallback(self) -> str | None:
        route = wheel_route(cached_only=False)
        if route is None:
            return None
        size = "size unknown" if route.cost is None else route.cost.describe(["torch"])
        return f"{route.command()} builds with NVIDIA's compiler wheels, no CUDA toolkit needed: {size}, once"

    def toolkit_folders(self, job) -> dict[str, Path]:
        root = toolkit_root(self.job_nvcc(job)) if job.compiled else None
        return {"cuda": root} if root is not None else {}

    def toolchain_ids(self) -> tuple[str, ...]:
        nvcc = nvcc_path()
        cxx = cxx_compiler()
        ids = [tool_version(nvcc) if nvcc else None, tool_version(cxx) if cxx else None]
        return tuple(i for i in ids if i)

    def metadata(self, job) -> dict:
        # A noarch variant embeds no device code: kernel-builder writes no archs for it.
        return {"archs": list(self.capabilities(job))} if job.compiled else {}

    def capabilities(self, job) -> tuple[str, ...]:
        """Every capability the variant embeds, across units (metadata's backend.archs)."""
        cuda = job.variant.backend_version
        supported = nvcc_architectures(self.job_nvcc(job))
        caps = {c.removesuffix("+PTX") for u in units_for_version(job.manifest, cuda)
                for c in effective_capabilities(u, cuda, supported, job.cuda_arch)}
        return tuple(sorted(caps, key=lambda c: (parse_version(c), c)))

    def prepare(self, job, say, progress) -> None:
        """Install the compiler wheels of the job's release into its managed environment
        when nothing else has that release, saying what they cost (job_nvcc would install
        them silently)."""
        if job.compiled and target_for(job.variant.platform) is not None:
            cuda_cross.ensure_wheels(job.env, job.variant.backend_version, say, progress)
        elif job.compiled and self._wheels_needed(job):
            cuda_wheels.install(job.env, job.variant.backend_version, say, progress)
        if job.compiled:
            cutlass_includes(job.manifest, job.variant.backend_version, say)

    def _wheels_needed(self, job) -> bool:
        """No nvcc of the job's release, and kbuild may install its wheels into the job's environment."""
        cuda = job.variant.backend_version
        nvcc = nvcc_for(cuda, job.env)
        return (nvcc is None or nvcc_version(nvcc) != cuda) and _wheels_would_serve(cuda, is_managed_env(job.env))

    def job_nvcc(self, job) -> str:
        """The job's nvcc (nvcc_for), after installing the wheels of its release into its
        managed environment when nothing else has that release."""
        cuda = job.variant.backend_version
        cross = target_for(job.variant.platform)
        if cross is not None:
            cuda_cross.ensure_wheels(job.env, cuda)
            host = nvcc_path()
            if host is None or nvcc_version(host) != cuda:
                raise BuildError(cuda_cross.host_nvcc_missing(cuda, cross, nvcc_version(host) if host else None))
            return cuda_cross.compose(job.env, cuda, cross, host)
        nvcc = nvcc_for(cuda, job.env)
        if self._wheels_needed(job):
            nvcc = cuda_wheels.install(job.env, cuda)
        if nvcc is None:
            raise BuildError(nvcc_missing(job.manifest) + _wheels_hint(cuda))
        if nvcc == cuda_wheels.wheel_nvcc(job.env, cuda):
            cuda_wheels.complete_layout(Path(nvcc).parent.parent, cuda)
        return nvcc

    def compile_spec(self, job) -> CompileSpec:
        manifest, env = job.manifest, job.env
        nvcc = self.job_nvcc(job)
        cuda = job.variant.backend_version
        supported = nvcc_architectures(nvcc)
        # The CUDA libraries' wheels: beside torch, or a cross build's target wheels.
        wheels = cuda_cross.wheels_site(env) if env.arch else Path(env.torch_dir).parent
        groups = [binding_group(manifest, CXX_SUFFIXES)]
        for unit in units_for_version(manifest, cuda):
            device_flags = gencode_flags(effective_capabilities(unit, cuda, supported, job.cuda_arch)) + unit.cuda_flags
            groups.append(unit_group(manifest, unit, CUDA_SUFFIXES, device_flags))
            groups.append(unit_group(manifest, unit, CXX_SUFFIXES, unit.cxx_flags))
        # As kernel-builder's include_directories(${CUTLASS_INCLUDE_DIR}): every source of the
        # library sees the CUTLASS a unit depends on (the binding's glue often includes it too).
        extra = cutlass_includes(manifest, cuda)
        groups = [replace(g, includes=g.includes + extra) if g and extra else g for g in groups]
        compiler, cache = compilers(job)
        cache = {
            **cache,
            "CMAKE_CUDA_COMPILER": nvcc,
            # Architectures come from -gencode per unit, never from CMake's default.
            "CMAKE_CUDA_ARCHITECTURES": "OFF",
            "CMAKE_CUDA_STANDARD": cxx_standard(env),
            "CMAKE_CXX_STANDARD": cxx_standard(env),
            # libcudart.so.N, the one torch has already loaded, not a second static copy.
            "CMAKE_CUDA_RUNTIME_LIBRARY": "Shared",
        }
        if compiler:
            cache.update(CMAKE_CXX_COMPILER=compiler, CMAKE_CUDA_HOST_COMPILER=compiler)
        return torch_spec(
            job, self.macro, ("CXX", "CUDA"), groups,
            language_options=(("CXX", ("-O3",)), ("CUDA", NVCC_FLAGS)),
            system_includes=cuda_include_dirs(nvcc, wheels),
            link_libraries=("c10_cuda", "torch_cuda"),
            cache=cache,
        )

