"""Assemble a variant folder: the Python package, the library, `_ops.py`, `symbols.json`, the
package packed into `<id>.zip` for `build-layout = "zip"`, `metadata.json` (sha256 digest of
every file, provenance), then move it into place in one rename."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import sys
from pathlib import Path

from kernel_builder import __version__
from kernel_builder.kernel import sources
from kernel_builder.compile.backends import get_backend
from kernel_builder.kernel.fusion import load_fusions, stamp_layouts
from kernel_builder.compile.job import BuildJob
from kernel_builder.environments import python_pins
from kernel_builder.kernel.provenance import kbuild_git_state
from kernel_builder.kernel.registration import registration_files
from kernel_builder.paths import templates_dir
from kernel_builder.runtime.digest import hash_variant
from kernel_builder.runtime.loader import REPLACED, STAGING_PREFIX, replaced_variant
from kernel_builder.runtime.zip_package import ZIP
from kernel_builder.assemble.symbols import describe_package, op_schemas
from kernel_builder.assemble.zip_layout import pack_package

# kernels 0.19.1 is the first release on the package index that imports a zip variant and
# reads new-style variant names (0.18.3 has neither; 0.19.0 was never published).
ZIP_KERNELS_MINVER = NEW_STYLE_KERNELS_MINVER = "0.19.1"


def _render(template: str, **values) -> str:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir("build"))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    return env.get_template(template).render(**values)


def package_files(job: BuildJob) -> list[Path]:
    """The files of torch-ext/<python_name>/ that the `pyext` extensions select, from the
    walk the input hash covers (kernel_builder.kernel.sources: links only inside the repo)."""
    source = job.manifest.torch or job.manifest.noarch
    suffixes = tuple(f".{ext}" for ext in source.pyext)
    return [p for p in sources.package_files(job.manifest) if p.name.endswith(suffixes)]


def stage_variant(job: BuildJob, library: Path | None, input_hash: str) -> Path:
    """Write the complete variant folder beside its destination and return it; on any
    failure nothing is left behind."""
    job.out_dir.mkdir(parents=True, exist_ok=True)
    staging = job.out_dir / f"{STAGING_PREFIX}{job.variant.name}-{os.getpid()}"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    try:
        _fill(staging, job, library, input_hash)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging


def _fill(staging: Path, job: BuildJob, library: Path | None, input_hash: str) -> None:
    package = job.manifest.package_dir
    for path in package_files(job):
        target = staging / path.relative_to(package)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    if not (staging / "layers.py").exists() and not (staging / "layers").is_dir():
        # The runtime looks for `layers`; a kernel without layers gets an empty module.
        (staging / "layers.py").write_text('"""This kernel defines no layers."""\n\n__all__: list[str] = []\n')
    stamp_layouts(staging, load_fusions(job.manifest.root))
    if library is not None:
        shutil.copy2(library, staging / job.library_name)
    ops_module = _render(
        "_ops.py.j2",
        name=job.manifest.name,
        variant=job.variant.name,
        library=job.library_name if library is not None else "",
        ops_name=job.ops_name,
        zip_layout=job.manifest.general.build_layout == ZIP,
    )
    (staging / "_ops.py").write_text(ops_module)
    # Before hashing, so the digest covers it; read from the package's files before they are packed.
    ops = op_schemas(map(Path, registration_files(job.manifest))) if library is not None else None
    (staging / "symbols.json").write_text(json.dumps(describe_package(staging, ops), indent=2) + "\n")
    if job.manifest.general.build_layout == ZIP:
        pack_package(staging, job.ops_name)
    metadata = build_metadata(job, hash_variant(staging), input_hash)
    (staging / "metadata.json").write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")


def required_kernels_version(job: BuildJob) -> str | None:
    """The oldest `kernels` release that loads this variant (metadata.json `kernels-minver`,
    which kernels >= 0.18 enforce with an "upgrade kernels" error); None: any release."""
    if job.manifest.general.build_layout == ZIP:
        return ZIP_KERNELS_MINVER
    if job.variant.new_style:
        # Older releases cannot even parse the name; the key says why to a reader of the metadata.
        return NEW_STYLE_KERNELS_MINVER
    return None


def backend_metadata(job: BuildJob) -> dict:
    """metadata.json's `backend` beyond its type: the compiled backend's archs, or a noarch
    variant's arch list from [torch-noarch] (kernels#668; none without one, as kernel-builder)."""
    noarch = job.manifest.noarch
    if noarch is not None:
        archs = noarch.archs_for(job.backend)
        return {} if archs is None else {"archs": list(archs)}
    return get_backend(job.backend).metadata(job)


def kernel_metadata(manifest, backend: str, ops_name: str, source) -> dict:
    """metadata.json's keys about the kernel and who built it, the same for every framework:
    id, name, version, license, python-depends, kernel-depends, provenance, upstream, source."""
    general = manifest.general
    kbuild = kbuild_git_state()
    builder: dict = {"version": __version__}
    if kbuild is not None:
        builder.update(commit=kbuild.commit, dirty=kbuild.dirty)
    provenance: dict = {"kernel-builder": builder}
    if source is not None:
        provenance["kernel"] = {"commit": source.commit, "dirty": source.dirty}
    metadata = {
        "id": ops_name,
        "name": general.name,
        "version": general.version,
        # The kernels runtime requires a string; SPDX spells "not stated" NOASSERTION.
        "license": general.license or "NOASSERTION",
        "python-depends": list(general.all_python_depends(backend)),
        "provenance": provenance,
    }
    kernel_depends = general.all_kernel_depends(backend)
    if kernel_depends:
        metadata["kernel-depends"] = [d.as_json() for d in kernel_depends]
    for key in ("upstream", "source"):
        if getattr(general, key):
            metadata[key] = getattr(general, key)
    return metadata


def build_metadata(job: BuildJob, files: dict[str, str], input_hash: str) -> dict:
    metadata = kernel_metadata(job.manifest, job.backend, job.ops_name, job.source)
    metadata.update({
        "backend": {"type": job.backend, **backend_metadata(job)},
        "digest": {"algorithm": "sha256", "files": files},
        # kbuild's own bookkeeping; the runtime ignores unknown keys.
        "kbuild": {"input-hash": input_hash, "variant": job.variant.name, "torch": job.env.torch_version},
    })
    pins = python_pins_of(job)
    if pins:  # the releases its import check and `kbuild test` install (environments.python_pins)
        metadata["kbuild"][python_pins.STAMP_KEY] = pins
    if job.manifest.general.build_layout == ZIP:
        metadata["build-layout"] = ZIP  # absent means "files", which every kernels release reads
    minver = required_kernels_version(job)
    if minver is not None:
        metadata["kernels-minver"] = minver
    return metadata


def python_pins_of(job: BuildJob) -> dict[str, str]:
    """kernel-builder's pinned release of each python-depends entry the variant declares."""
    pins = python_pins.kernel_pins(job.manifest.root)
    return {name: pins[name] for name in job.manifest.general.all_python_depends(job.backend) if name in pins}


def install(staging: Path, dest: Path) -> None:
    """Replace dest by staging so that dest holds, at every instant, the old variant or the
    new one: the two names are exchanged in one atomic step where the filesystem can, then
    the old variant, now under the staging name, goes (a build killed before that leaves a
    staging folder, which the next build removes). Where it cannot, two renames leave a
    moment with the old variant under its replaced name only: the next build puts it back
    (remove_stale_staging) and kbuild's loader finds it there meanwhile (runtime.loader)."""
    if not dest.exists():
        staging.rename(dest)
    elif _exchange(staging, dest):
        shutil.rmtree(staging, ignore_errors=True)
    else:
        old = dest.with_name(f"{STAGING_PREFIX}{REPLACED}{dest.name}-{os.getpid()}")
        dest.rename(old)
        staging.rename(dest)
        shutil.rmtree(old, ignore_errors=True)


# rename(2) cannot replace a non-empty folder; these calls swap two existing names atomically.
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2  # Linux renameat2(2), glibc >= 2.28
_RENAME_SWAP = 2  # macOS renamex_np(2)


def _exchange(a: Path, b: Path) -> bool:
    """Swap the paths a and b in one atomic step; False (and nothing changed) where this
    system or filesystem cannot (e.g. NFS; any other failure leaves both names as they were)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if sys.platform == "linux" and hasattr(libc, "renameat2"):
        call = libc.renameat2
        call.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
        return call(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0
    if sys.platform == "darwin" and hasattr(libc, "renamex_np"):
        call = libc.renamex_np
        call.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint)
        return call(os.fsencode(a), os.fsencode(b), _RENAME_SWAP) == 0
    return False


def remove_stale_staging(out_dir: Path) -> None:
    """Leftovers of an interrupted build are never mistaken for variants; clear them.

    Call it holding the output's build lock (kernel_builder.pipeline.build_kernel.build_lock): then no live build
    owns any of them. A build killed between install's two renames left the previous
    variant under its replaced name and nothing in its place: that one goes back."""
    if not out_dir.is_dir():
        return
    for path in sorted(out_dir.glob(f"{STAGING_PREFIX}*")):
        variant = replaced_variant(path.name)
        if variant and not (out_dir / variant).exists():
            path.rename(out_dir / variant)
        else:
            shutil.rmtree(path, ignore_errors=True)
