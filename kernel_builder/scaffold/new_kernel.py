"""`kbuild init`: render templates/init into a new kernel repo.

templates/init/common/ is always written, templates/init/<folder>/ for each folder a
chosen backend needs (ROCm shares the CUDA source through its portability header, so
`rocm` alone still writes the `.cu`). In template paths `__python_name__` becomes the
package name and a leading `dot-` a leading dot; `.j2` files are rendered with jinja2
(StrictUndefined) and lose the suffix, the rest are copied byte for byte.

Template variables: `name` (kebab-case), `python_name` (underscores), `class_name`
(CamelCase, for the benchmark's class), `backends` (the chosen ones, in BACKENDS order) and
`kbuild_version`.

The repo also gets the GitHub workflow of `kbuild ci github` (ci_github.py) with its
defaults, unless GitHub's Linux runners can build none of its variants (Metal only).

Everything is written to a hidden temporary folder beside `dest` and renamed into
place, so a failure leaves nothing behind."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

from kernel_builder import __version__
from kernel_builder.errors import KbuildError, UsageError
from kernel_builder.kernel.manifest import KEBAB_CASE
from kernel_builder.paths import templates_dir
from kernel_builder.variants import BACKENDS
from kernel_builder.backend_facts import FACTS

__all__ = ["BACKENDS", "BACKEND_FOLDERS", "EXAMPLE_OP", "scaffold", "templates_dir"]

# The template folders (under templates/init/) each backend needs (its record's template_folder).
BACKEND_FOLDERS = {name: (FACTS[name].template_folder,) for name in BACKENDS}
EXAMPLE_OP = "scale_add"  # every scaffold implements scale_add(Tensor! out, Tensor x, Tensor y, float alpha)


def _target_name(rel: Path, python_name: str) -> Path:
    parts = []
    for part in rel.parts:
        part = part.replace("__python_name__", python_name)
        if part.startswith("dot-"):
            part = "." + part[4:]
        parts.append(part)
    path = Path(*parts)
    return path.with_suffix("") if path.suffix == ".j2" else path


def _check_backends(backends: Sequence[str]) -> list[str]:
    valid = ", ".join(BACKENDS)
    if isinstance(backends, str):  # "cpu,cuda" passed straight through
        backends = [b.strip() for b in backends.split(",") if b.strip()]
    unknown = [b for b in backends if b not in BACKENDS]
    if len(unknown) == 1:
        raise UsageError(f"--backends: unknown backend {unknown[0]!r}; choose from {valid}")
    if unknown:
        raise UsageError(f"--backends: unknown backends {', '.join(map(repr, unknown))}; choose from {valid}")
    if not backends:
        raise UsageError(f"--backends: choose at least one of {valid}")
    return [b for b in BACKENDS if b in backends]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _ci_workflow(staging: Path, dest: Path) -> list[Path]:
    """Write `kbuild ci github`'s workflow into the staged repo; nothing for a Metal-only
    kernel, whose variants no Linux build image builds, nor when CI could not install this
    kbuild (`kbuild init` says why: ci_workflow_skipped)."""
    from kernel_builder.scaffold.ci_github import WORKFLOW_PATH, render_workflow
    from kernel_builder.errors import VariantError

    try:
        text = render_workflow(staging)
    except VariantError:  # the default selection (Linux x86_64) is empty
        return []
    except UsageError:  # kbuild's own source is not one a CI runner reaches
        return []
    target = staging / WORKFLOW_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return [dest / WORKFLOW_PATH]


def scaffold(dest: Path, name: str, backends: Sequence[str]) -> list[Path]:
    """Create the kernel repo `dest` for kernel `name` with `backends`; return the files written.

    Raises KbuildError (nothing written) for a name that is not kebab-case, an unknown or
    empty backend list, or a `dest` that exists and is not an empty folder."""
    import jinja2

    if not isinstance(name, str) or not KEBAB_CASE.match(name):
        raise UsageError(
            f"kernel name {name!r} is not kebab-case; use 2 or more lowercase letters, digits and single '-', e.g. my-kernel")
    chosen = _check_backends(backends)
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise KbuildError(f"{dest} already exists; choose another name or remove it")

    python_name = name.replace("-", "_")
    folders = ["common"] + sorted({f for b in chosen for f in BACKEND_FOLDERS[b]})
    class_name = "".join(part.capitalize() for part in name.split("-"))
    values = {"name": name, "python_name": python_name, "class_name": class_name, "backends": chosen,
              "kbuild_version": __version__}
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)

    # Parents we create are removed again if anything fails.
    created_parents = [p for p in reversed(dest.absolute().parents) if not p.exists()]
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    written: list[Path] = []
    try:
        os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes it private; the repo should not be
        for folder in folders:
            base = templates_dir("init", folder)
            if not base.is_dir():
                raise KbuildError(f"kbuild's templates/init/{folder} folder is missing; reinstall kbuild")
            sources = sorted(p for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
            for source in sources:
                rel = _target_name(source.relative_to(base), python_name)
                target = staging / rel
                if target.exists():
                    raise KbuildError(f"templates/init: {rel} is provided by two template folders")
                target.parent.mkdir(parents=True, exist_ok=True)
                if source.suffix == ".j2":
                    target.write_text(env.from_string(source.read_text()).render(**values))
                else:
                    shutil.copyfile(source, target)
                written.append(dest / rel)
        written += _ci_workflow(staging, dest)
        if dest.exists():
            dest.rmdir()  # an empty folder we are allowed to fill
        os.rename(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for parent in reversed(created_parents):
            try:
                parent.rmdir()
            except OSError:
                break
        raise
    return written
