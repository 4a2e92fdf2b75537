"""The interface every backend implements, and what backends share to find their tools.

Every hook lives on `Backend`, with a docstring; the optional ones have a default there,
so callers call them directly instead of asking whether a backend has them.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from kernel_builder.variants import Variant

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from kernel_builder.compile.cmake import CompileSpec
    from kernel_builder.compile.job import BuildJob
    from kernel_builder.environments.probe import BuildEnv
    from kernel_builder.kernel.manifest import Manifest


@dataclass(frozen=True)
class Unavailable:
    """Why a backend cannot build here: shown as a skip, never as a failure."""

    backend: str
    reason: str


@dataclass(frozen=True)
class Toolchain:
    """A backend's compiler as `kbuild doctor` reports it: where it is and which version,
    or (`missing`) the backend's own reason it is not here."""

    tool: str  # what to call the compiler: "nvcc", "g++", "xcrun metal"
    path: str | None = None
    version: str | None = None  # short: "13.0", "12.2.0"
    version_line: str | None = None  # the tool's own first line of --version
    detail: str | None = None  # e.g. nvcc's architectures
    missing: str | None = None


class Backend(ABC):
    """One backend (cpu, cuda, rocm, metal, xpu): what it builds here, with which compilers,
    and how. Backends hold no state; `get_backend` makes each once."""

    name: ClassVar[str]
    macro: ClassVar[str]  # the define that binding sources test: CPU_KERNEL, CUDA_KERNEL, ...
    tool: ClassVar[str]  # its compiler, as `kbuild doctor` names it when it is missing
    install: ClassVar[str]  # what to install when the compiler is missing or does not fit
    compiles: ClassVar[bool] = True  # False: a noarch-only backend (tpu, neuron, cann)

    @abstractmethod
    def target(self, manifest: "Manifest | None", env: "BuildEnv") -> Variant | Unavailable:
        """The variant this backend builds in the build environment `env`, or why it cannot."""

    def default_variant(self, manifest: "Manifest | None") -> Variant | Unavailable | None:
        """The variant to build in a managed environment when the build environment does not
        build one (or builds one the kernel's bounds exclude); None: the backend builds only
        in the build environment, so the build environment's answer stands."""
        return None

    def variant_reason(self, manifest: "Manifest | None", variant: Variant, env: "BuildEnv | None") -> str | None:
        """Why this machine's toolchain cannot build `variant` in an environment kbuild makes
        for it, or None. By default kbuild makes none for the backend: the reason is the build
        environment's `env` (if any) or that."""
        answer = self.target(manifest, env) if env is not None else None
        if isinstance(answer, Unavailable):
            return answer.reason
        return f"kbuild cannot make a {self.name} build environment"

    def prepare(self, job: "BuildJob", say: "Callable[[str], None]", progress: "Callable[[str], None]") -> None:
        """Install what the job's toolchain needs into its environment before anything else
        (the CUDA compiler wheels): `say` hears once what it downloads and how big,
        `progress` what pip is doing. By default nothing is needed."""

    def toolkit_note(self, variant: Variant) -> str | None:
        """Which of this machine's toolkits builds `variant`, where that can differ
        (`kbuild variants` adds it to the environment); None by default."""
        return None

    def toolkit_folders(self, job: "BuildJob") -> dict[str, "Path"]:
        """The job's toolkit folders whose place differs between machines (the CUDA
        toolkit's), by name: kernel_builder.compile.job_folders keeps them out of the input id
        and the library. None by default: system compilers live in system folders."""
        return {}

    def toolkit_wheels(self, version: tuple[int, int]) -> tuple[str, ...]:
        """The pip requirements that install this backend's toolkit `version` (a build image
        installs them: TOOLKIT_REQUIREMENTS); () where its image installs the toolkit another
        way. A KbuildError says why where no wheels exist for that version."""
        return ()

    def fallback(self) -> str | None:
        """How this backend builds here without the toolchain it lacks, with what that
        downloads (`kbuild doctor` says it; it may ask pip, for seconds), or None."""
        return None

    def device_check_possible(self) -> bool:
        """Whether, with no variant buildable here, `device_check` can still compile the
        kernel's device code (ROCm without a ROCm torch)."""
        return False

    def device_check(self, manifest: "Manifest", env: "BuildEnv | None", work_dir: "Path"):
        """Compile the kernel's device code into `work_dir` without claiming a variant; the
        result has `checked`, `summary` and `log_file`. Called only when
        `device_check_possible()` says so."""
        raise NotImplementedError(f"the {self.name} backend has no device check")

    @abstractmethod
    def toolchain(self) -> Toolchain:
        """The compiler, found the way `target` finds it, for `kbuild doctor`."""

    @abstractmethod
    def toolchain_ids(self) -> tuple[str, ...]:
        """The compilers and versions it uses: part of a job's input hash."""

    def metadata(self, job: "BuildJob") -> dict:
        """Extra keys of metadata.json's `backend`."""
        return {}

    @abstractmethod
    def compile_spec(self, job: "BuildJob") -> "CompileSpec":
        """The sources, flags and libraries of the generated CMake project."""


@functools.cache
def tool_version(tool: str, flag: str = "--version") -> str | None:
    """First line of `tool --version`, or None if the tool is not on PATH."""
    path = shutil.which(tool)
    if path is None:
        return None
    try:
        out = subprocess.run([path, flag], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (out.stdout or out.stderr).strip().splitlines()
    return f"{path}: {lines[0] if lines else 'unknown version'}"


_FOLDER_LINES = ("InstalledDir:", "Configuration file:", "Found candidate GCC installation:", "Selected GCC installation:")


@functools.cache
def tool_identity(tool: str) -> str:
    """`tool --version` in full, without the lines that name a folder (clang's InstalledDir,
    the tool's own path): which compiler it is, wherever it is installed."""
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown version"
    lines = [line.strip() for line in (out.stdout or out.stderr).splitlines()]
    kept = [line for line in lines if line and not line.startswith(_FOLDER_LINES) and not re.search(r"(^|[\s=:])/", line)]
    return "; ".join(kept) or "unknown version"


def without_tool_path(tool_id: str) -> str:
    """A toolchain id (`tool_version`: "/usr/bin/g++: g++ (Debian 12.2.0-14) 12.2.0") without its path."""
    return re.sub(r"^/\S*: ", "", tool_id)


def short_version(line: str | None) -> str | None:
    """The last dotted version in a `--version` line: "g++ (Debian 12.2.0-14) 12.2.0" -> "12.2.0"."""
    found = re.findall(r"\d+\.\d+(?:\.\d+)?", line or "")
    return found[-1] if found else None


def dotted(version: tuple[int, int] | None) -> str | None:
    """(13, 0) -> "13.0"."""
    return None if version is None else f"{version[0]}.{version[1]}"
