"""The folders of a build job whose place differs from runner to runner: the kernel's checkout,
its work tree (in kbuild's cache), the build environment's site-packages and Python headers,
kbuild's own templates, kbuild's CUTLASS headers and the backend's toolkit (the CUDA toolkit's folder).

Two things must not depend on where those folders are, or a second runner (another checkout
path, another environment folder) could never share a built variant (issue 34):

- the job's input id (kernel_builder.runners.local.job_input_hash, the output cache's key):
  `neutral` spells each folder `<name>` in the facts it hashes;
- the compiled library: `reproducible` has the compilers write each folder as /kbuild/<name>
  wherever they embed a path (__FILE__ in TORCH_CHECK's messages and in device asserts, debug
  information), so a library compiled in one folder is byte-identical to one compiled in
  another, and an output cache entry from another runner is the library this one would build.

Example:
    >>> folders = job_folders(job)
    >>> neutral("/home/me/relu/relu.cpp", folders)
    '<kernel>/relu.cpp'
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable

from kernel_builder.compile.backends import get_backend
from kernel_builder.compile.backends.common import merged_options
from kernel_builder.compile.cmake import CompileSpec
from kernel_builder.compile.job import BuildJob
from kernel_builder.environments import cutlass_headers
from kernel_builder.paths import templates_dir

# Where a compiled library says its sources were: no runner's real folder.
EMBEDDED_ROOT = "/kbuild"
# The host compiler's option; nvcc hands it to the host compiler, which also preprocesses the
# device code (so a device assert's __FILE__ is mapped too).
_PREFIX_MAP = "-ffile-prefix-map"
_HOST_OPTION = {"CXX": "{}", "HIP": "{}", "CUDA": "-Xcompiler={}"}


def runner_folders(job: BuildJob) -> dict[str, Path]:
    """The job's checkout, work tree and environment, and kbuild's templates (what fixed_paths links)."""
    folders = {"kernel": job.manifest.root, "work": job.work_dir, "kbuild-templates": templates_dir(),
               # CUTLASS's headers, <version>-<digest>/ in it (environments.cutlass_headers).
               "cutlass": cutlass_headers.tools_root()}
    if job.env is not None:
        folders["site-packages"] = Path(job.env.torch_dir).parent
        folders["python"] = Path(job.env.python_include)
    return folders


def job_folders(job: BuildJob) -> dict[str, Path]:
    """Each folder of `job` whose place depends on the runner, by a name the same on every
    runner: runner_folders and its backend's toolkit."""
    folders = runner_folders(job)
    if job.env is not None:
        folders |= get_backend(job.backend).toolkit_folders(job)
    return folders


def spellings(folders: dict[str, Path | str]) -> tuple[tuple[str, str], ...]:
    """(path, name) for each folder as given and resolved (a spec may spell it either way),
    longest path first, so a folder inside another is matched as itself."""
    pairs = {(spelled, name) for name, folder in folders.items() for spelled in (str(folder), str(Path(folder).resolve()))}
    return tuple(sorted(pairs, key=lambda pair: (-len(pair[0]), pair)))


def remap_paths(value: Any, links: Iterable[tuple[str, str]]) -> Any:
    """`value` (a dataclass, tuple, dict or string) with every path under one of the `links`'
    folders (longest first) spelled through its replacement."""
    links = tuple(links)
    if isinstance(value, str):
        return _remap_text(value, links)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return replace(value, **{f.name: remap_paths(getattr(value, f.name), links) for f in dataclasses.fields(value)})
    if isinstance(value, tuple):
        return tuple(remap_paths(item, links) for item in value)
    if isinstance(value, dict):
        return {key: remap_paths(item, links) for key, item in value.items()}
    return value


def _remap_text(text: str, links: tuple[tuple[str, str], ...]) -> str:
    # A folder matches only whole path components (/a/b must not rewrite /a/bc).
    for real, fixed in links:
        start = 0
        while (at := text.find(real, start)) >= 0:
            end = at + len(real)
            if end == len(text) or text[end] in '/"; :,=':
                text = text[:at] + fixed + text[end:]
                end = at + len(fixed)
            start = end
    return text


def neutral(value: Any, folders: dict[str, Path]) -> Any:
    """`value` with each of `folders` spelled `<name>`: the same text on every runner."""
    return remap_paths(value, ((path, f"<{name}>") for path, name in spellings(folders)))


def reproducible(spec: CompileSpec, spelled: Iterable[tuple[str, str]]) -> CompileSpec:
    """`spec` whose compilers embed each folder of `spelled` ((path as this compile spells it,
    name): spellings, or CompilePaths.compiled) as /kbuild/<name>."""
    # Shortest first: GCC and clang apply the last matching map, so a folder inside another wins.
    ordered = sorted(set(spelled), key=lambda pair: (len(pair[0]), pair))
    maps = [f"{_PREFIX_MAP}={path}={EMBEDDED_ROOT}/{name}" for path, name in ordered]
    extra = tuple((language, tuple(_HOST_OPTION[language].format(m) for m in maps))
                  for language in spec.languages if language in _HOST_OPTION)
    return replace(spec, language_options=merged_options(spec.language_options, extra))
