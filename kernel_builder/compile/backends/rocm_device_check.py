"""The ROCm device compile check, for a machine with hipcc but no ROCm torch: the device
code of the rocm units' sources that include no torch header (a torch TU cannot compile
for HIP without ROCm torch's headers) compiles to one code object per source and arch,
and no variant is claimed."""

from __future__ import annotations

import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kernel_builder.compile.backends.common import compiled_files, cxx_standard
from kernel_builder.compile.backends.rocm_toolchain import (
    DEFAULT_ARCHS,
    HIP_DEFINITIONS,
    HIP_SUFFIXES,
    HIPCC_FLAGS,
    effective_archs,
    processor,
    require_hipcc,
    run_hip,
    supported_archs,
)
from kernel_builder.environments.probe import BuildEnv
from kernel_builder.errors import BuildError
from kernel_builder.kernel.manifest import Manifest

# Headers that only a torch install provides; for HIP, only a ROCm torch.
TORCH_HEADER_DIRS = ("torch/", "ATen/", "c10/")

NOT_LINKED = "compiled, not linked: no ROCm torch in the build environment"
NEEDS_ROCM_TORCH = "includes torch headers, needs a ROCm torch"
NOTHING_TO_CHECK = (
    "no ROCm device code compiled: every .cu/.hip source of the rocm units includes torch headers, "
    "which need a ROCm torch; put the __global__ kernels and a plain launcher (raw pointers, a stream) "
    "in a .cu file that includes no torch header and call it from the torch glue, as `kbuild init` scaffolds"
)


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
    hipcc = require_hipcc()
    supported = supported_archs(manifest, hipcc)
    std = cxx_standard(env) if env else "20"  # torch >= 2.10, as the newest variants build
    root = manifest.root
    tasks: list[tuple[CodeObject, tuple[Path, ...]]] = []
    not_checked: dict[str, str] = {}
    dropped: dict[str, None] = {}
    for unit in manifest.units_for("rocm"):
        archs = effective_archs(unit, supported, hipcc)
        dropped.update((a, None) for a in unit.rocm_archs or DEFAULT_ARCHS if processor(a) not in supported)
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
            return run_hip(list(o.command), timeout=1800)
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
