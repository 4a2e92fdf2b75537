"""Compile a [tvm-ffi] kernel's library: the binding sources ([tvm-ffi] src) and one backend's
`[kernel.*]` units, against the headers and libtvm_ffi of the `apache-tvm-ffi` wheel, into
`_<name>_<backend>_<id>.so` (no `lib` prefix), which the variant's `_ops.py` opens with
`tvm_ffi.load_module`.

The flags are kernel-builder's for this framework: `<BACKEND>_KERNEL` defined (the binding
exports only that backend's functions), `TVM_FFI_EXTENSION_NAME` the op id, `-fno-gnu-unique`
so two kernels in one process never share a static. No torch is involved: the toolchain is an
interpreter with apache-tvm-ffi and `kernels` (for the import check) over kbuild's own, made
once in kbuild's cache by runtime_python.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kernel_builder.environments.runtime_overlay import RuntimeEnvError, runtime_python
from kernel_builder.kernel.manifest import KernelUnit, Manifest
from kernel_builder.variants import parse_version

TVM_FFI_PIP = "apache-tvm-ffi"
# The import check loads each variant with the runtime itself; installed only where kbuild's
# interpreter lacks it (the kernels extra), in the range kbuild's layout is tested with.
KERNELS_PIP = "kernels>=0.19.1,<0.20"
CXX_SUFFIXES = (".cpp", ".cc", ".cxx", ".c")
# What the library's C++ gets on every backend (C++17: tvm-ffi's headers require it).
_CXX_FLAGS = ("-std=c++17", "-O3", "-fPIC", "-fno-gnu-unique")
_PROBE = (
    "import json, tvm_ffi, tvm_ffi.libinfo as l; "
    "print(json.dumps({'version': tvm_ffi.__version__, 'include': l.include_paths(), 'lib': l.find_libtvm_ffi()}))"
)


@dataclass(frozen=True)
class TvmFfiToolchain:
    python: str  # an interpreter that imports tvm_ffi and kernels
    version: str  # apache-tvm-ffi's version, e.g. 0.1.15.post2
    include: tuple[str, ...]
    library: str  # libtvm_ffi.so

    @property
    def major_minor(self) -> tuple[int, int]:
        major, minor = self.version.split(".")[:2]
        return int(major), int(minor)


def find_toolchain(base_python: str = sys.executable) -> TvmFfiToolchain:
    """apache-tvm-ffi over `base_python` (pip-installed into an overlay once); raises
    RuntimeEnvError with pip's reason where it cannot be installed."""
    python = runtime_python(base_python, (TVM_FFI_PIP, KERNELS_PIP))
    done = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True)
    if done.returncode != 0:  # installed, yet broken (a wheel for another platform, a missing library)
        last = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), f"exit status {done.returncode}")
        raise RuntimeEnvError(f"tvm_ffi does not import in {python}: {last.strip()}")
    answer = json.loads(done.stdout)
    return TvmFfiToolchain(python, answer["version"], tuple(answer["include"]), answer["lib"])


def compilable(unit_sources: tuple[str, ...], suffixes: tuple[str, ...]) -> list[str]:
    """The sources a compiler is given (headers listed in `src` are inputs, not compiled)."""
    return [s for s in unit_sources if s.endswith(suffixes)]


@dataclass(frozen=True)
class Nvcc:
    """The CUDA compiler a cuda variant is built with, and what it compiles for."""

    path: str
    version: tuple[int, int]
    supported: frozenset[str]

    @property
    def lib_dir(self) -> Path:
        """The toolkit's libraries (libcudart_static.a): lib64/ or lib/ beside the include folder
        nvcc passes (nvcc on PATH can be a wrapper script), else beside nvcc's bin/."""
        from kernel_builder.compile.backends.cuda import nvcc_include_dirs

        homes = [Path(d).parent for d in nvcc_include_dirs(self.path)] + [Path(self.path).resolve().parents[1]]
        folders = [home / d for home in homes for d in ("lib64", "lib")]
        return next((f for f in folders if (f / "libcudart_static.a").is_file()), folders[-1])


def find_nvcc() -> Nvcc | None:
    """nvcc as the torch CUDA backend finds it ($CUDA_HOME, PATH, /usr/local/cuda); None: none here."""
    from kernel_builder.compile.backends.cuda import nvcc_architectures, nvcc_path, nvcc_version

    path = nvcc_path()
    version = nvcc_version(path) if path else None
    if path is None or version is None:
        return None
    return Nvcc(path, version, nvcc_architectures(path))


@dataclass(frozen=True)
class Library:
    path: Path
    archs: tuple[str, ...] = ()  # CUDA capabilities embedded (metadata.json backend.archs)


def compile_library(
    manifest: Manifest, backend: str, ops_name: str, toolchain: TvmFfiToolchain, work_dir: Path, log: Path,
    jobs: int = 1, nvcc: Nvcc | None = None,
) -> Library:
    """Compile and link `work_dir/<ops_name>.so` for `backend` (cpu: g++; cuda: nvcc for the .cu
    files, each unit's capabilities or the defaults of nvcc's release, cudart linked statically);
    every command and its output go to `log`. Raises CalledProcessError on a failing compile."""
    from kernel_builder.compile.backends.cuda import cutlass_includes, effective_capabilities, gencode_flags, units_for_version

    cxx = os.environ.get("CXX") or shutil.which("g++") or "c++"
    macro = f"-D{backend.upper()}_KERNEL"
    common = [macro, f"-DTVM_FFI_EXTENSION_NAME={ops_name}", *(f"-I{d}" for d in toolchain.include)]
    if backend == "cuda" and nvcc is not None:  # the CUTLASS its units depend on, for every source
        common += [f"-I{d}" for d in cutlass_includes(manifest, nvcc.version)]
    framework = manifest.other
    work_dir.mkdir(parents=True, exist_ok=True)
    commands: list[list[str]] = []
    objects: list[str] = []
    archs: set[str] = set()

    def add(compiler: list[str], source: str, includes: tuple[str, ...], flags: tuple[str, ...]) -> None:
        obj = work_dir / (source.replace("/", "__") + ".o")
        objects.append(str(obj))
        include_flags = [f"-I{manifest.root / d}" for d in includes]
        commands.append([*compiler, *common, *include_flags, *flags, "-c", str(manifest.root / source), "-o", str(obj)])

    for source in compilable(framework.src, CXX_SUFFIXES):
        add([cxx, *_CXX_FLAGS], source, framework.include, framework.cxx_flags)
    units: tuple[KernelUnit, ...] = (
        units_for_version(manifest, nvcc.version) if backend == "cuda" and nvcc else manifest.units_for(backend)
    )
    for unit in units:
        for source in compilable(unit.src, CXX_SUFFIXES):
            add([cxx, *_CXX_FLAGS], source, unit.include, unit.cxx_flags)
        if backend == "cuda" and nvcc is not None:
            caps = effective_capabilities(unit, nvcc.version, nvcc.supported)
            archs.update(c.removesuffix("+PTX") for c in caps)
            host = "-Xcompiler=" + ",".join(f for f in _CXX_FLAGS if f.startswith("-f"))
            for source in compilable(unit.src, (".cu",)):
                add([nvcc.path, "-std=c++17", "-O3", host, *gencode_flags(caps)], source, unit.include, unit.cuda_flags)
    library = work_dir / f"{ops_name}.so"
    link = [cxx, "-shared", "-o", str(library), *objects, f"-L{Path(toolchain.library).parent}", "-ltvm_ffi"]
    if backend == "cuda" and nvcc is not None:
        link += [f"-L{nvcc.lib_dir}", "-lcudart_static", "-ldl", "-lrt", "-lpthread"]
    with log.open("w") as out:
        _run_all(commands, out, jobs)
        _run_all([link], out, 1)
    return Library(library, tuple(sorted(archs, key=lambda c: (parse_version(c), c))))


def _run_all(commands: list[list[str]], out, jobs: int) -> None:
    """Run `commands`, `jobs` at a time, each logged; the first failure raises after the others end."""
    pending = list(commands)
    running: list[tuple[list[str], subprocess.Popen]] = []
    failed: subprocess.CalledProcessError | None = None
    while pending or running:
        while pending and len(running) < max(1, jobs) and failed is None:
            command = pending.pop(0)
            out.write("$ " + " ".join(command) + "\n")
            out.flush()
            running.append((command, subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)))
        command, process = running.pop(0)
        if process.wait() != 0 and failed is None:
            failed = subprocess.CalledProcessError(process.returncode, command)
        if failed is not None:
            pending.clear()
    if failed is not None:
        raise failed
