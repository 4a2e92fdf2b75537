"""`kbuild init`: render templates/init into a new kernel repo.

templates/init/common/ is always written, templates/init/<backend>/ for each chosen
backend (ROCm shares the CUDA source through its portability header). In paths,
`__python_name__` becomes the package name and `dot-` a leading dot; `.j2` files are
rendered with jinja2, the rest copied. Everything is written to a temporary folder
first and renamed into place."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

from kernel_builder import __version__
from kernel_builder.errors import KbuildError
from kernel_builder.manifest import KEBAB_CASE
from kernel_builder.resources import templates_dir
from kernel_builder.variants import BACKENDS

# Which template folders each backend needs.
BACKEND_FOLDERS = {"cpu": ("cpu",), "cuda": ("cuda",), "rocm": ("cuda",), "metal": ("metal",), "xpu": ("xpu",)}
EXAMPLE_OP = "scale_add"  # the op every scaffold implements: out = x + alpha * y


def _target_name(rel: Path, python_name: str) -> Path:
    parts = []
    for part in rel.parts:
        part = part.replace("__python_name__", python_name)
        if part.startswith("dot-"):
            part = "." + part[4:]
        parts.append(part)
    path = Path(*parts)
    return path.with_suffix("") if path.suffix == ".j2" else path


def scaffold(dest: Path, name: str, backends: Sequence[str]) -> list[Path]:
    """Create the kernel repo `dest` for kernel `name`; return the files written."""
    import jinja2

    if not KEBAB_CASE.match(name):
        raise KbuildError(f"kernel name {name!r} is not kebab-case; use lowercase letters, digits and '-', e.g. my-kernel", 2)
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or not backends:
        raise KbuildError(f"--backends: unknown backend {unknown[0]!r}; choose from {', '.join(BACKENDS)}" if unknown else f"--backends: choose at least one of {', '.join(BACKENDS)}", 2)
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise KbuildError(f"{dest} already exists; choose another name or remove it")
    chosen = [b for b in BACKENDS if b in backends]
    folders = ["common"] + sorted({f for b in chosen for f in BACKEND_FOLDERS[b]})
    values = {"name": name, "python_name": name.replace("-", "_"), "backends": chosen, "kbuild_version": __version__}
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    written = []
    try:
        for folder in folders:
            base = templates_dir("init", folder)
            for source in sorted(p for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
                rel = _target_name(source.relative_to(base), values["python_name"])
                target = staging / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                if source.suffix == ".j2":
                    target.write_text(env.from_string(source.read_text()).render(**values))
                else:
                    shutil.copyfile(source, target)
                written.append(dest / rel)
        if dest.exists():
            dest.rmdir()
        os.rename(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return written
