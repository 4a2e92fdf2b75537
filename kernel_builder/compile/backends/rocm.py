"""ROCm: the same `.cu` sources as CUDA (no hipify: kernels use a portability header),
compiled by ROCm's clang for each unit's `rocm-archs`.

The archs are the unit's `rocm-archs` (or FORMATS.md's defaults) that the installed
hipcc can compile: a dry run (`-###`) rejects processors its clang does not know and
those without device libraries, which costs a fraction of a second and is cached.

With a ROCm torch in the build environment a variant builds through CMake's HIP
language: `.cu` files are marked LANGUAGE HIP, and CMake wants clang itself there, not
the hipcc wrapper. Without one, `device_check` compiles the device code of the sources
that include no torch header (a torch TU cannot compile for HIP without ROCm torch's
headers) and claims no variant."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kernel_builder.compile.backends.base import Backend, Toolchain, Unavailable, dotted, tool_version
from kernel_builder.compile.backends.common import (
    CXX_SUFFIXES,
    binding_group,
    compiled_files,
    cxx_compiler,
    cxx_standard,
    env_target,
    torch_spec,
    unit_group,
)
from kernel_builder.compile.cmake import CompileSpec
from kernel_builder.environments.probe import BuildEnv
from kernel_builder.errors import BuildError
from kernel_builder.kernel.manifest import KernelUnit, Manifest
from kernel_builder.variants import Variant, parse_version

HIP_SUFFIXES = (".cu", ".hip")
DEFAULT_ARCHS = ("gfx906", "gfx908", "gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101", "gfx1200", "gfx1201")

# What torch's extension builder passes for HIP sources (COMMON_HIPCC_FLAGS): kernels
# written for it get half/bfloat16 arithmetic from c10, not from hip_fp16.h.
HIPCC_FLAGS = (
    "-O3",
    "-fno-gpu-rdc",
    "-DCUDA_HAS_FP16=1",
    "-D__HIP_NO_HALF_OPERATORS__=1",
    "-D__HIP_NO_HALF_CONVERSIONS__=1",
    "-DHIP_ENABLE_WARP_SYNC_BUILTINS=1",
)
# And for every source (COMMON_HIP_FLAGS): c10's headers pick their HIP paths by USE_ROCM.
HIP_DEFINITIONS = ("__HIP_PLATFORM_AMD__=1", "USE_ROCM=1")

# Headers that only a torch install provides; for HIP, only a ROCm torch.
TORCH_HEADER_DIRS = ("torch/", "ATen/", "c10/")

HIPCC_MISSING = "hipcc not found on PATH or in $ROCM_PATH/bin (install ROCm/HIP, e.g. apt-get install hipcc)"
NOT_LINKED = "compiled, not linked: no ROCm torch in the build environment"
NEEDS_ROCM_TORCH = "includes torch headers, needs a ROCm torch"
NOTHING_TO_CHECK = (
    "no ROCm device code compiled: every .cu/.hip source of the rocm units includes torch headers, "
    "which need a ROCm torch; put the __global__ kernels and a plain launcher (raw pointers, a stream) "
    "in a .cu file that includes no torch header and call it from the torch glue, as `kbuild init` scaffolds"
)


# -- the toolchain ------------------------------------------------------------------


def hipcc_path() -> str | None:
    """hipcc from $ROCM_PATH/bin, else PATH."""
    rocm = os.environ.get("ROCM_PATH")
    if rocm and (Path(rocm) / "bin" / "hipcc").is_file():
        return str(Path(rocm) / "bin" / "hipcc")
    return shutil.which("hipcc")


def hip_env() -> dict[str, str]:
    # With nvcc on PATH, hipcc would otherwise pick the NVIDIA platform.
    return dict(os.environ, HIP_PLATFORM="amd")


def _run(command: list[str], timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, env=hip_env(), timeout=timeout, check=False)


def _query(command: list[str]) -> str:
    try:
        return _run(command).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


@functools.cache
def hipcc_id(hipcc: str) -> str:
    """`hipcc --version` in one line: the HIP version and the clang behind it."""
    lines = [line for line in _query([hipcc, "--version"]).splitlines() if "version" in line.lower()]
    return f"{hipcc}: {'; '.join(lines) or 'unknown version'}"


def hipcc_version(hipcc: str) -> tuple[int, int] | None:
    """(major, minor) of HIP ("HIP version: 5.2.21153-0"), which follows ROCm's."""
    m = re.search(r"HIP version: (\d+)\.(\d+)", hipcc_id(hipcc))
    return (int(m.group(1)), int(m.group(2))) if m else None


@functools.cache
def rocm_root(hipcc: str) -> str:
    """The ROCm install hipcc belongs to: its libraries and CMake package files."""
    for var in ("ROCM_PATH", "ROCM_HOME"):
        if os.environ.get(var):
            return os.environ[var]
    return _query([str(Path(hipcc).with_name("hipconfig")), "--rocmpath"]) or str(Path(hipcc).parent.parent)


@functools.cache
def hip_clang(hipcc: str) -> str | None:
    """The clang++ that hipcc drives: CMake's HIP language refuses the wrapper itself."""
    folder = os.environ.get("HIP_CLANG_PATH") or _query([str(Path(hipcc).with_name("hipconfig")), "--hipclangpath"])
    folder = Path(folder or Path(rocm_root(hipcc)) / "llvm" / "bin")
    # Debian names it clang++-<major>; ROCm clang++ (and amdclang++).
    names = ["clang++", "amdclang++"] + sorted(p.name for p in folder.glob("clang++-[0-9]*"))
    return next((str(folder / n) for n in names if (folder / n).is_file()), None)


def _processor(target_id: str) -> str:
    """"gfx90a:xnack+" -> "gfx90a"."""
    return target_id.split(":")[0]


# clang names a target it does not know, or one whose device library is not installed.
_REJECTED = re.compile(
    r"invalid target ID '([^']+)'|cannot find ROCm device library for ([\w:+-]+)|unsupported \w+ gpu architecture: ([\w:+-]+)"
)


@functools.cache
def hipcc_architectures(hipcc: str, candidates: tuple[str, ...]) -> frozenset[str]:
    """The processors of `candidates` (target IDs) that this hipcc compiles device code for.

    Processors only: clang refuses gfx90a beside gfx90a:xnack+ in one command, and the
    features are checked when the unit compiles. A dry run reports every unknown processor
    at once, then (once those are gone) every one without a device library, so this takes
    two or three runs of ~0.1 s."""
    remaining = list(dict.fromkeys(_processor(a) for a in candidates))
    while remaining:
        command = [hipcc, "-###", "-x", "hip", "--cuda-device-only", "-c", os.devnull]
        try:
            result = _run(command + [f"--offload-arch={a}" for a in remaining])
        except (OSError, subprocess.TimeoutExpired) as e:
            raise BuildError(f"{hipcc} could not be run ({e})") from None
        rejected = {next(g for g in m.groups() if g) for m in _REJECTED.finditer(result.stderr)}
        kept = [a for a in remaining if a not in rejected]
        if kept == remaining:
            if result.returncode != 0:
                error = next((line for line in result.stderr.splitlines() if "error" in line), result.stderr.strip())
                raise BuildError(f"{hipcc} cannot compile HIP device code: {error[:300]}")
            break
        remaining = kept
    return frozenset(remaining)


def supported_archs(manifest: Manifest, hipcc: str) -> frozenset[str]:
    """Which processors of the rocm units' archs and the defaults this hipcc compiles."""
    wanted = {a for u in manifest.units_for("rocm") for a in u.rocm_archs or ()} | set(DEFAULT_ARCHS)
    return hipcc_architectures(hipcc, tuple(sorted(wanted)))


def effective_archs(unit: KernelUnit, supported: frozenset[str], hipcc: str) -> tuple[str, ...]:
    """The unit's archs (or the defaults) that this hipcc compiles, in order."""
    wanted = unit.rocm_archs or DEFAULT_ARCHS
    kept = tuple(a for a in wanted if _processor(a) in supported)
    if not kept:
        have = ", ".join(a for a in DEFAULT_ARCHS if a in supported) or "none"
        raise BuildError(
            f"[kernel.{unit.name}] rocm-archs {', '.join(wanted)}: this hipcc (HIP {_version_text(hipcc)}) "
            f"compiles none of them (of the default archs it compiles {have}); list archs it supports "
            "or install a newer ROCm"
        )
    return kept


def _version_text(hipcc: str) -> str:
    version = hipcc_version(hipcc)
    return f"{version[0]}.{version[1]}" if version else "of unknown version"


def _require_hipcc() -> str:
    hipcc = hipcc_path()
    if hipcc is None:
        raise BuildError(HIPCC_MISSING)
    return hipcc


# -- variants against a ROCm torch --------------------------------------------------


class RocmBackend(Backend):
    name = "rocm"
    macro = "ROCM_KERNEL"
    tool = "hipcc"
    install = "ROCm/HIP (hipcc) of a ROCm release torch ships"

    def _toolchain_reason(self, rocm: tuple[int, int]) -> str | None:
        hipcc = hipcc_path()
        if hipcc is None:
            return HIPCC_MISSING
        have = hipcc_version(hipcc)
        if have is None:
            return f"{hipcc} --version did not report a HIP version"
        if have[0] != rocm[0]:
            return (
                f"hipcc is HIP {have[0]}.{have[1]} but the variant needs ROCm {rocm[0]}.{rocm[1]}; "
                "hipcc and torch must share the ROCm major version"
            )
        return None

    def target(self, manifest: Manifest | None, env: BuildEnv) -> Variant | Unavailable:
        if hipcc_path() is None:
            return Unavailable(self.name, HIPCC_MISSING)
        if not env.hip:
            return Unavailable(
                self.name,
                f"the build environment's torch {env.torch_version} is not a ROCm build; "
                "ROCm variants need a ROCm torch",
            )
        rocm = parse_version(env.hip)
        reason = self._toolchain_reason(rocm)
        if reason:
            return Unavailable(self.name, reason)
        return env_target(manifest, self.name, env, rocm)

    def variant_reason(self, manifest: Manifest | None, variant: Variant, env: BuildEnv | None) -> str | None:
        assert variant.backend_version is not None
        return self._toolchain_reason(variant.backend_version)

    def device_check_possible(self) -> bool:
        """Without a ROCm torch, hipcc can still compile the torch-free device code."""
        return hipcc_path() is not None

    def device_check(self, manifest: Manifest, env: BuildEnv | None, work_dir: Path) -> "DeviceCheck":
        return device_check(manifest, env, work_dir, work_dir / "build.log")

    def toolchain(self) -> Toolchain:
        path = hipcc_path()
        if path is None:
            return Toolchain(self.tool, missing=HIPCC_MISSING)
        return Toolchain(self.tool, path, dotted(hipcc_version(path)), hipcc_id(path))

    def toolchain_ids(self) -> tuple[str, ...]:
        hipcc = hipcc_path()
        cxx = cxx_compiler()
        ids = [hipcc_id(hipcc) if hipcc else None, tool_version(cxx) if cxx else None]
        return tuple(i for i in ids if i)

    def metadata(self, job) -> dict:
        # A noarch variant embeds no device code: kernel-builder writes no archs for it.
        return {"archs": list(self.archs(job))} if job.compiled else {}

    def archs(self, job) -> tuple[str, ...]:
        """Every arch the variant embeds, across units (metadata's backend.archs)."""
        hipcc = _require_hipcc()
        supported = supported_archs(job.manifest, hipcc)
        units = job.manifest.units_for(self.name)
        return tuple(dict.fromkeys(a for u in units for a in effective_archs(u, supported, hipcc)))

    def compile_spec(self, job) -> CompileSpec:
        manifest, env = job.manifest, job.env
        hipcc = _require_hipcc()
        clang = hip_clang(hipcc)
        if clang is None:
            raise BuildError(f"no clang++ found beside {hipcc} (hipconfig --hipclangpath); CMake compiles HIP with clang")
        supported = supported_archs(manifest, hipcc)
        groups = [binding_group(manifest, CXX_SUFFIXES)]
        for unit in manifest.units_for(self.name):
            arch_flags = tuple(f"--offload-arch={a}" for a in effective_archs(unit, supported, hipcc))
            hip = unit_group(manifest, unit, HIP_SUFFIXES, arch_flags + unit.hip_flags)
            # CMake compiles .cu as CUDA unless told otherwise.
            groups.append(hip and dataclasses.replace(hip, language="HIP"))
            groups.append(unit_group(manifest, unit, CXX_SUFFIXES, unit.cxx_flags))
        rocm = rocm_root(hipcc)
        std = cxx_standard(env)
        cache = {
            "CMAKE_HIP_COMPILER": clang,
            "CMAKE_HIP_PLATFORM": "amd",
            # Architectures come from --offload-arch per unit, never from the GPUs present.
            "CMAKE_HIP_ARCHITECTURES": "OFF",
            "CMAKE_HIP_STANDARD": std,
            "CMAKE_CXX_STANDARD": std,
            "CMAKE_PREFIX_PATH": rocm,  # hip-lang-config.cmake
        }
        compiler = cxx_compiler()
        if compiler:
            cache["CMAKE_CXX_COMPILER"] = compiler
        return torch_spec(
            job, self.macro, ("CXX", "HIP"), groups,
            definitions=HIP_DEFINITIONS,
            language_options=(("CXX", ("-O3",)), ("HIP", HIPCC_FLAGS)),
            # The HIP runtime headers for .cpp glue that the host compiler builds.
            system_includes=(str(Path(rocm) / "include"),),
            link_dirs=(str(Path(rocm) / "lib"),),
            link_libraries=("c10_hip", "torch_hip", "amdhip64"),
            cache=cache,
        )


# -- the device compile check (no ROCm torch) ---------------------------------------


@dataclass(frozen=True)
class Includes:
    """What a source reaches through its #includes within the kernel repo."""

    files: tuple[Path, ...]  # the source and every repo header it reaches
    torch: str | None = None  # the first torch header reached, e.g. "<ATen/Dispatch.h> in relu_cuda/relu.cu"


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.MULTILINE)


def scan_includes(source: Path, search: tuple[Path, ...], root: Path) -> Includes:
    """Follow `source`'s includes that resolve in the repo; stop at the first torch header.

    Preprocessor conditions are not evaluated: a torch include in any branch counts."""
    seen: dict[Path, None] = {}
    stack = [source]
    while stack:
        path = stack.pop()
        if path in seen:
            continue
        seen[path] = None
        found = []
        for quote, name in _INCLUDE.findall(path.read_text(errors="replace")):
            dirs = ((path.parent,) if quote == '"' else ()) + search
            target = next((d / name for d in dirs if (d / name).is_file()), None)
            if target is not None:
                found.append(target.resolve())
            elif name.startswith(TORCH_HEADER_DIRS):
                where = path.relative_to(root) if path.is_relative_to(root) else path
                return Includes(tuple(seen), f"{quote}{name}{'>' if quote == '<' else quote} in {where}")
        stack.extend(reversed(found))
    return Includes(tuple(seen))


@dataclass(frozen=True)
class CodeObject:
    """One device code object: an AMDGPU ELF for one source and one arch."""

    unit: str
    source: str  # relative to the kernel root
    arch: str
    path: Path
    command: tuple[str, ...]


@dataclass(frozen=True)
class DeviceCheck:
    """What `device_check` compiled, for which archs, and what it could not check."""

    objects: tuple[CodeObject, ...]
    archs: tuple[str, ...]  # every arch compiled, in the units' order
    not_checked: tuple[tuple[str, str], ...]  # (source, reason)
    dropped: tuple[str, ...]  # archs the kernel asks for that this hipcc cannot compile
    log_file: Path

    @property
    def checked(self) -> bool:
        return bool(self.objects)

    @property
    def summary(self) -> str:
        """One line for `kbuild build`'s report."""
        if not self.objects:
            return NOTHING_TO_CHECK if self.not_checked else "no .cu or .hip sources in the rocm units"
        sources = ", ".join(dict.fromkeys(o.source for o in self.objects))
        count = f"{len(self.objects)} device code object{'s' if len(self.objects) > 1 else ''}"
        parts = [f"{count} ({sources}) for {', '.join(self.archs)}"]
        parts += [f"not checked: {source} ({reason})" for source, reason in self.not_checked]
        if self.dropped:
            parts.append(f"left out {', '.join(self.dropped)} (not supported by this hipcc)")
        return f"{NOT_LINKED}; " + "; ".join(parts)


def _object_path(work_dir: Path, unit: str, source: str, arch: str) -> Path:
    stem = Path(source).with_suffix("").as_posix().replace("/", "_")
    return work_dir / unit / f"{stem}.{arch.replace(':', '_')}.o"


def _up_to_date(obj: Path, command: tuple[str, ...], closure: tuple[Path, ...]) -> bool:
    """Built by the same command after its source and every repo header it includes changed."""
    stamp = obj.with_suffix(".cmd")
    try:
        built = obj.stat().st_mtime_ns
        return stamp.read_text() == "\0".join(command) and all(p.stat().st_mtime_ns <= built for p in closure)
    except OSError:
        return False


def device_check(manifest: Manifest, env: BuildEnv | None, work_dir: Path, log_file: Path) -> DeviceCheck:
    """Compile the device code of the rocm units' torch-free sources with hipcc, one code
    object per (unit, source, arch), into work_dir; output and commands go to log_file.

    Sources that include torch headers are listed in `not_checked`. Raises BuildError when
    hipcc is missing, a unit's archs are all unsupported, or a compile fails."""
    hipcc = _require_hipcc()
    supported = supported_archs(manifest, hipcc)
    std = cxx_standard(env) if env else "20"  # torch >= 2.10, as the newest variants build
    root = manifest.root
    tasks: list[tuple[CodeObject, tuple[Path, ...]]] = []
    not_checked: dict[str, str] = {}
    dropped: dict[str, None] = {}
    for unit in manifest.units_for("rocm"):
        archs = effective_archs(unit, supported, hipcc)
        dropped.update((a, None) for a in unit.rocm_archs or DEFAULT_ARCHS if _processor(a) not in supported)
        search = tuple((root / i).resolve() for i in unit.include) + (root.resolve(),)
        for source in compiled_files(unit.src, HIP_SUFFIXES):
            includes = scan_includes((root / source).resolve(), search, root.resolve())
            if includes.torch:
                not_checked[source] = f"{NEEDS_ROCM_TORCH}: {includes.torch}"
                continue
            for arch in archs:
                obj = _object_path(work_dir, unit.name, source, arch)
                command = (
                    hipcc, "-x", "hip", f"-std=c++{std}", f"--offload-arch={arch}", "--cuda-device-only",
                    "--no-gpu-bundle-output", "-c", *HIPCC_FLAGS, *(f"-D{d}" for d in HIP_DEFINITIONS),
                    "-DROCM_KERNEL", *unit.hip_flags, *(f"-I{d}" for d in search), str(root / source), "-o", str(obj),
                )
                tasks.append((CodeObject(unit.name, source, arch, obj, command), includes.files))
    _compile(tasks, log_file)
    objects = tuple(t[0] for t in tasks)
    return DeviceCheck(
        objects=objects,
        archs=tuple(dict.fromkeys(o.arch for o in objects)),
        not_checked=tuple(not_checked.items()),
        dropped=tuple(dropped),
        log_file=log_file,
    )


def _compile(tasks: list[tuple[CodeObject, tuple[Path, ...]]], log_file: Path) -> None:
    """Run the out-of-date compiles in parallel; log them in order; raise on the first failure."""
    todo = [o for o, closure in tasks if not _up_to_date(o.path, o.command, closure)]
    for o in todo:
        o.path.parent.mkdir(parents=True, exist_ok=True)
        o.path.with_suffix(".cmd").unlink(missing_ok=True)

    def run(o: CodeObject) -> subprocess.CompletedProcess:
        try:
            return _run(list(o.command), timeout=1800)
        except (OSError, subprocess.TimeoutExpired) as e:
            return subprocess.CompletedProcess(o.command, 1, "", f"error: {e}\n")

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = list(pool.map(run, todo))
    log_file.parent.mkdir(parents=True, exist_ok=True)
    failed = None
    with open(log_file, "w") as log:
        log.write(f"# ROCm device compile check: {len(todo)} to compile, {len(tasks) - len(todo)} up to date\n")
        for o, result in zip(todo, results):
            log.write("$ " + " ".join(o.command) + "\n" + result.stdout + result.stderr)
            if result.returncode == 0:
                o.path.with_suffix(".cmd").write_text("\0".join(o.command))
            elif failed is None:
                failed = (o, result)
    if failed is not None:
        o, result = failed
        # The compiler's own output, not the command line (a hip-flag may say -Wno-error).
        lines = [line.strip() for line in (result.stdout + result.stderr).splitlines() if line.strip()]
        error = next((line for line in lines if re.search(r"\berror\b", line, re.IGNORECASE)), lines[-1] if lines else "no output")
        raise BuildError(f"hipcc failed on {o.source} for {o.arch}: {error[:300]} (full log: {log_file})")
