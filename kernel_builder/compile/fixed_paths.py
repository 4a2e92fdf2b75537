"""Fixed absolute paths for a job's compiles: the same on every runner sharing one compiler cache.

sccache's keys for nvcc's steps hold absolute paths: cudafe++'s and cicc's
`--orig_src_file_name` and `--orig_src_path_name` arguments and the line markers of their
preprocessed input, which SCCACHE_BASEDIRS does not rewrite (it rewrites the preprocessed
text of host compiles only). Two runners whose checkouts, work trees or build environments
sit in different folders would never share a CUDA entry. So when the cache is shared
beyond this machine, a job compiles through one folder named by the kernel and variant:

    /tmp/kbuild-<uid>/compile/<kernel>/<variant>/kernel        -> the checkout
                                                /work          -> the job's work tree (kbuild's cache)
                                                /site-packages -> the build environment's (torch, CUDA wheels)
                                                /python        -> the Python headers
                                                /kbuild-templates -> kbuild's own sources
                                                /cutlass       -> kbuild's CUTLASS headers
                                                /units/...     CUDA translation units (real files)

and the generated project names only those. CMake and Ninja keep a path as given (they do
not resolve links), so every runner's compile commands name the same files. nvcc alone
resolves links, for `--orig_src_path_name` of the file it compiles: so each .cu file is
compiled as a one-line unit in units/, a real file at the fixed path, that includes the
kernel's file through the link (its own includes resolve beside it as before).

The folder is held (a lock) while the job compiles. A second job of the same kernel and
variant at the same time on this machine takes `<variant>.2`, and so on: its keys then
differ from other runners', which costs hits, never correctness.

Example:
    >>> with fixed_compile_paths(job) as paths:
    ...     spec = paths.apply(spec)  # sources, includes, link folders under the fixed folder
    ...     build_project(spec, paths.work_dir, ...)
"""

from __future__ import annotations

import os
import shutil
import stat
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

from kernel_builder.compile.cmake import CompileSpec, write_if_changed
from kernel_builder.compile.job import BuildJob
from kernel_builder.compile.job_folders import remap_paths, runner_folders, spellings
from kernel_builder.compile.private_files import own_folder
from kernel_builder.errors import BuildError
from kernel_builder.file_lock import exclusive_lock

# A literal /tmp, not $TMPDIR: the point is a path that is the same on every runner.
ROOT_PARENT = Path("/tmp")
_MAX_TWINS = 64  # concurrent jobs of one kernel and variant on one machine


@dataclass(frozen=True)
class CompilePaths:
    """Where CMake sees the job's folders: `links` maps each real folder to the path the
    project names instead (empty: the real paths); `units` is the folder of the one-line
    CUDA units, None when .cu files compile where they are."""

    work_dir: Path
    links: tuple[tuple[str, str], ...] = ()
    units: Path | None = None
    kernel: Path | None = None  # the checkout's link

    def apply(self, spec: CompileSpec) -> CompileSpec:
        """`spec` as compiled through these paths. Writes the CUDA units it names."""
        if not self.links:
            return spec
        spec = self.remap(spec)
        if self.units is None or self.kernel is None:
            return spec
        units: dict[str, str] = {}
        for group in spec.groups:
            for file in group.files:
                if file.endswith(".cu") and file.startswith(f"{self.kernel}/"):
                    units[file] = str(self.units / file[len(str(self.kernel)) + 1:])
        for file, unit in units.items():
            unit_path = Path(unit)
            unit_path.parent.mkdir(parents=True, exist_ok=True)
            write_if_changed(unit_path, f'// kbuild: {Path(file).name} at a path every runner shares\n#include "{file}"\n')
        groups = tuple(replace(g, files=tuple(units.get(f, f) for f in g.files)) for g in spec.groups)
        return replace(spec, groups=groups, source_order=tuple(units.get(f, f) for f in spec.source_order))

    def real(self, path: Path) -> Path:
        """A path under one of the links, spelled through the real folder again."""
        text = str(path)
        for real, fixed in self.links:
            if text == fixed or text.startswith(fixed + "/"):
                return Path(real + text[len(fixed):])
        return path

    def compiled(self, folders: dict[str, Path]) -> tuple[tuple[str, str], ...]:
        """(path, name) for `folders` (kernel_builder.compile.job_folders) as the compiles
        spell them: through their links and the CUDA units' folder only, so that the flags
        that name them are the same on every runner; else as given and resolved."""
        if not self.links:
            return spellings(folders)
        spelled = tuple((self.remap(str(folder)), name) for name, folder in folders.items())
        return spelled + (((str(self.units), "units"),) if self.units is not None else ())

    def remap(self, value: Any) -> Any:
        """`value` (a dataclass, tuple, dict or string in the spec) with every path under a
        linked folder spelled through its link."""
        return remap_paths(value, self.links)


def real_paths(job: BuildJob) -> CompilePaths:
    """The job compiled where its folders are (a cache on this machine only)."""
    return CompilePaths(job.work_dir)


@contextmanager
def fixed_compile_paths(job: BuildJob) -> Iterator[CompilePaths]:
    """Links for the job's folders under the fixed folder, held until the job has compiled."""
    assert job.env is not None, "a compiled job has its environment"
    # /tmp/kbuild-<uid> is this user's alone: a folder someone else made (or a link planted
    # there) would let them choose what the compiles read.
    parent = own_folder(ROOT_PARENT, "compile") / job.manifest.python_name
    parent.mkdir(exist_ok=True)
    folders = runner_folders(job)
    targets = {name: folder.resolve() for name, folder in folders.items()}
    with ExitStack() as stack:
        folder = None
        for n in range(1, _MAX_TWINS + 1):
            candidate = parent / (job.variant.name if n == 1 else f"{job.variant.name}.{n}")
            candidate.mkdir(exist_ok=True)
            if stack.enter_context(exclusive_lock(candidate / "lock", blocking=False, inherit=True)):
                folder = candidate
                break
        if folder is None:
            raise BuildError(f"{_MAX_TWINS} builds of {job.variant.name} already hold {parent}; wait for them")
        for name, target in targets.items():
            _point(folder / name, target)
        # The spec may spell a folder as given or resolved: both map to its link.
        spellings = {(str(path), str(folder / name)) for name in folders for path in (folders[name], targets[name])}
        links = sorted(spellings, key=lambda pair: -len(pair[0]))
        yield CompilePaths(folder / "work", tuple(links), folder / "units", folder / "kernel")


def _point(link: Path, target: Path) -> None:
    """`link` -> `target`, replacing whatever link was there in one rename. A real folder or
    file there (a crashed or older build, a hand) is removed when it is this user's, else
    refused in one line: a rename cannot replace a folder, and a compile must not read it."""
    if link.is_symlink() and os.readlink(link) == str(target):
        return
    try:
        info = os.lstat(link)
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISLNK(info.st_mode):
        if info.st_uid != os.getuid():
            raise BuildError(f"{link} is not this user's, where kbuild keeps a link to {target}; remove it and build again")
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(link)
        else:
            link.unlink()
    temporary = link.with_name(f".{link.name}.{os.getpid()}")
    temporary.unlink(missing_ok=True)
    temporary.symlink_to(target)
    os.replace(temporary, link)
