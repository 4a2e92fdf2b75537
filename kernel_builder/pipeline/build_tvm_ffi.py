"""`kbuild build` of a [tvm-ffi] kernel (kernel-builder's relu-tvm-ffi layout): one variant per
backend this machine can compile, named as kernel-builder names them and kernels 0.19.1 reads
them, `tvm-ffi<major><minor>-<compute>-<arch>-<os>` (tvm-ffi01-cpu-x86_64-linux), holding the
package of tvm-ffi-ext/<name>/, `_ops.py` (opens the library with tvm_ffi.load_module), the
library `_<name>_<backend>_<id>.so` and metadata.json (digests, provenance).

The torch pipeline (plan, runners, environments with torch) is not involved: a tvm-ffi kernel
links no torch. Each variant is checked before it is installed, as a torch variant is: metadata
and digests, no gnu_unique symbol, and kernels.get_local_kernel loads it (checks.tvm_ffi_import).
CPU and CUDA (where nvcc is) are built here; the other backends are skipped with the reason
(SKIPPED_BACKENDS). Without a CUDA GPU kernels never picks a cuda variant, so its import check
opens the library with tvm_ffi.load_module instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable

from kernel_builder.assemble.stamp import install, kernel_metadata, remove_stale_staging
from kernel_builder.checks.tvm_ffi_import import check_tvm_ffi_import
from kernel_builder.checks.variant_checks import _as_warning, check_abi, check_gnu_unique, check_metadata, check_needed
from kernel_builder.compile.backends.cuda import nvcc_missing
from kernel_builder.compile.tvm_ffi import Library, Nvcc, TvmFfiToolchain, compile_library, find_nvcc, find_toolchain
from kernel_builder.environments import cutlass_headers
from kernel_builder.environments.runtime_overlay import RuntimeEnvError
from kernel_builder.errors import BuildError, UsageError
from kernel_builder.kernel import sources
from kernel_builder.kernel.identity import kernel_identity
from kernel_builder.kernel.manifest import Manifest
from kernel_builder.paths import cache_dir, short_key, templates_dir
from kernel_builder.pipeline.options import BuildOptions
from kernel_builder.pipeline.report import BuildReport
from kernel_builder.runners.result import BUILT, FAILED, SKIPPED, UP_TO_DATE, JobResult
from kernel_builder.runtime.digest import hash_variant
from kernel_builder.runtime.loader import STAGING_PREFIX
from kernel_builder.runtime.system import host_platform

# Why a backend's tvm-ffi variant is not built here (kernel-builder builds them with its toolchains).
SKIPPED_BACKENDS = {
    "rocm": "kbuild builds [tvm-ffi] kernels for cpu and cuda only so far; kernel-builder builds the ROCm variant",
    "xpu": "kbuild builds [tvm-ffi] kernels for cpu and cuda only so far (XPU also needs Intel oneAPI's icpx)",
    "metal": "kbuild builds [tvm-ffi] kernels for cpu and cuda only so far (Metal also needs macOS and Xcode)",
}
BUILT_BACKENDS = ("cpu", "cuda")


def _skip_reason(manifest: Manifest, backend: str, nvcc: Nvcc | None) -> str | None:
    if backend not in BUILT_BACKENDS:
        return SKIPPED_BACKENDS.get(backend, f"kbuild builds [tvm-ffi] kernels for cpu and cuda only so far, not {backend}")
    return nvcc_missing(manifest) if backend == "cuda" and nvcc is None else None


_OPTIONS_REFUSED = ("matrix", "shard", "env", "cuda_arch", "output_cache")


def variant_name(toolchain: TvmFfiToolchain, backend: str, nvcc: Nvcc | None = None) -> str:
    """kernel-builder's name for a tvm-ffi variant built here (its build-variants.cmake): cuda
    carries nvcc's release (cu130); without nvcc the name says `cuda` (the variant is skipped)."""
    major, minor = toolchain.major_minor
    compute = f"cu{nvcc.version[0]}{nvcc.version[1]}" if backend == "cuda" and nvcc else backend
    arch, os_name = host_platform()
    return f"tvm-ffi{major}{minor}-{compute}-{arch}-{os_name}"


def build_tvm_ffi(
    manifest: Manifest, options: BuildOptions, say: Callable[[str], None] = lambda message: None
) -> BuildReport:
    """Build every backend of `manifest` this machine can, into options.out (default build/)."""
    started = time.perf_counter()
    for name in _OPTIONS_REFUSED:
        if getattr(options, name):
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} does not apply to a [tvm-ffi] kernel: it builds here, one variant per backend, with no torch")
    if options.variant_names == "new":
        raise UsageError("--variant-names new: kernel-builder names [tvm-ffi] variants in the legacy style only (tvm-ffi01-cpu-...)")
    if options.runner != "local":
        raise UsageError(f"--runner {options.runner}: a [tvm-ffi] kernel builds here only (--runner local)")
    out = Path(options.out) if options.out else manifest.root / "build"
    try:
        toolchain = find_toolchain()
    except RuntimeEnvError as exc:
        why = f"apache-tvm-ffi is not usable here: {exc.message}"
        results = tuple(JobResult(f"({b})", b, SKIPPED, detail=why) for b in manifest.general.backends)
        return BuildReport(manifest.name, out, results, time.perf_counter() - started, 1)
    nvcc = find_nvcc() if "cuda" in manifest.general.backends else None
    wanted = {variant_name(toolchain, b, nvcc): b for b in manifest.general.backends}
    for requested in options.variants:
        if requested not in wanted:
            raise UsageError(f"--variant {requested}: not a variant of this [tvm-ffi] kernel here; its variants: {', '.join(wanted)}")
    results = []
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(out)
    for name, backend in wanted.items():
        if options.variants and name not in options.variants:
            continue
        why = _skip_reason(manifest, backend, nvcc)
        if why:
            results.append(JobResult(name, backend, SKIPPED, detail=why))
            continue
        say(f"building {name} ...")
        results.append(_build_variant(manifest, backend, name, toolchain, out, options.import_check, options.strict_abi, nvcc))
    return BuildReport(manifest.name, out, tuple(results), time.perf_counter() - started, 1)


def input_hash(manifest: Manifest, toolchain: TvmFfiToolchain, kernel_id: str) -> str:
    """What a variant was built from: the sources (in the id), apache-tvm-ffi, kbuild's templates,
    the CUTLASS releases its units depend on (their folder names: version and content digest)."""
    template = (templates_dir("build") / "_ops_tvm_ffi.py.j2").read_bytes()
    cutlass = [r.key for r in cutlass_headers.wanted(d for u in manifest.units for d in u.depends)]
    return short_key(json.dumps([kernel_id, toolchain.version, short_key(template.decode()), _compile_module_key(), *cutlass]))


def _compile_module_key() -> str:
    """The compile flags live in compile/tvm_ffi.py: a change to them rebuilds."""
    from kernel_builder.compile import tvm_ffi

    return short_key(Path(tvm_ffi.__file__).read_text())


def _build_variant(
    manifest: Manifest, backend: str, name: str, toolchain: TvmFfiToolchain, out: Path, import_check: bool,
    strict_abi: bool, nvcc: Nvcc | None = None,
) -> JobResult:
    started = time.perf_counter()
    rust = [f"[kernel.{u.name}] ({u.language})" for u in manifest.units_for(backend) if u.language.startswith("rust")]
    if rust:
        return JobResult(name, backend, SKIPPED, detail=f"Rust unit {', '.join(rust)}: kbuild does not build Rust units yet; "
                         "kernel-builder builds them with cargo")
    depends = sorted({d for u in manifest.units_for(backend) for d in u.depends})
    # CUTLASS's headers are the one dependency kbuild provides (cuda only, as kernel-builder).
    unprovided = [d for d in depends if not (backend == "cuda" and d.startswith(cutlass_headers.PREFIX))]
    if unprovided:
        return JobResult(name, backend, SKIPPED, detail=f"depends {unprovided} of a [tvm-ffi] {backend} unit: kbuild builds none yet")
    kernel_id, source = kernel_identity(manifest)
    ops_name = f"_{manifest.python_name}_{backend}_{kernel_id}"
    wanted_hash = input_hash(manifest, toolchain, kernel_id)
    dest = out / name
    if _up_to_date(dest, wanted_hash):
        return JobResult(name, backend, UP_TO_DATE, time.perf_counter() - started, size=_size(dest))
    work = cache_dir("tvm-ffi-work", short_key(str(manifest.root.resolve())), name)
    log = work / "build.log"
    try:
        work.mkdir(parents=True, exist_ok=True)
        built = compile_library(manifest, backend, ops_name, toolchain, work, log, jobs=os.cpu_count() or 1, nvcc=nvcc)
    except BuildError as exc:  # a unit's capabilities this nvcc cannot compile
        return JobResult(name, backend, FAILED, time.perf_counter() - started, detail=exc.message)
    except subprocess.CalledProcessError as exc:
        return JobResult(name, backend, FAILED, time.perf_counter() - started,
                         detail=f"{Path(exc.cmd[0]).name} failed (exit {exc.returncode}); see the log", log=str(log))
    staging = out / f"{STAGING_PREFIX}{name}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        library = built.path
        _stage(staging, manifest, backend, name, built, ops_name, source, wanted_hash, toolchain)
        abi = check_abi(staging)
        if not strict_abi:  # as for a torch variant built here
            abi = _as_warning(abi, "a local build follows this machine's glibc and libstdc++")
        checks = [abi, check_needed(staging), check_gnu_unique(staging), check_metadata(staging)]
        if import_check:
            checks.append(check_tvm_ffi_import(staging, name, staging / library.name, toolchain.python,
                                               with_kernels=backend == "cpu" or _has_gpu(toolchain.python)))
        failed = [c for c in checks if c.status == "failed"]
        if failed:
            shutil.rmtree(staging, ignore_errors=True)
            detail = "; ".join(f"{c.check}: {c.detail}" for c in failed)
            return JobResult(name, backend, FAILED, time.perf_counter() - started, detail=detail, log=str(log), checks=tuple(checks))
        install(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return JobResult(name, backend, BUILT, time.perf_counter() - started, size=_size(dest), log=str(log), checks=tuple(checks))


def _stage(staging: Path, manifest: Manifest, backend: str, name: str, built: Library, ops_name: str, source,
           wanted_hash: str, toolchain: TvmFfiToolchain) -> None:
    """The variant folder: package files (the `pyext` extensions), _ops.py, library, metadata.json."""
    import jinja2

    staging.mkdir(parents=True)
    suffixes = tuple(f".{ext}" for ext in manifest.other.pyext)
    for path in sources.package_files(manifest):
        if path.name.endswith(suffixes):
            target = staging / path.relative_to(manifest.package_dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    library = built.path
    shutil.copy2(library, staging / library.name)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir("build"))),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    ops = env.get_template("_ops_tvm_ffi.py.j2").render(name=manifest.name, variant=name, library=library.name, ops_name=ops_name)
    (staging / "_ops.py").write_text(ops)
    metadata = kernel_metadata(manifest, backend, ops_name, source)
    metadata.update({
        "backend": {"type": backend, **({"archs": list(built.archs)} if built.archs else {})},
        "digest": {"algorithm": "sha256", "files": hash_variant(staging)},
        # kbuild's own bookkeeping; the runtime ignores unknown keys.
        "kbuild": {"input-hash": wanted_hash, "variant": name, "tvm-ffi": toolchain.version},
    })
    (staging / "metadata.json").write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")


def _has_gpu(python: str) -> bool:
    """Whether kernels (in `python`) would pick a cuda variant here: torch sees a CUDA GPU."""
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([python, "-c", probe], capture_output=True).returncode == 0


def _up_to_date(dest: Path, wanted_hash: str) -> bool:
    try:
        metadata = json.loads((dest / "metadata.json").read_text())
    except (OSError, ValueError):
        return False
    return metadata.get("kbuild", {}).get("input-hash") == wanted_hash and check_metadata(dest).status == "ok"


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())

