"""The environment variables kbuild's builder reads, read in one place.

`read_environment()` takes one snapshot of them into a frozen `KbuildEnvironment`; modules
ask for a fresh snapshot when they need one (tests change variables between calls). The
variables, by what they set:

- `KBUILD_CACHE_DIR`: kbuild's cache (probed environments, CMake work trees, logs, locks);
  else `$XDG_CACHE_HOME/kbuild`, else `~/.cache/kbuild`.
- `KBUILD_ENVS_DIR`: the managed build environments; else `<cache>/venvs`.
- `KBUILD_TORCH_INDEX`: the pip index torch is installed from when an environment is
  created and no `--torch-index` was given.
- `KBUILD_COMPILER_CACHE`: `ccache`, `sccache` or `none` (unset or `auto`: whichever is
  installed); `--compiler-cache/--no-compiler-cache` overrides it.
- `CCACHE_DIR`, `SCCACHE_DIR`: the compiler cache's folder (else one in kbuild's cache);
  `CCACHE_BASEDIR`: the user's own base folder for ccache's relative paths. sccache's own
  SCCACHE_* variables (a remote backend: kernel_builder.compile.remote_cache) reach the
  sccache server kbuild starts unchanged.
- `KBUILD_DIST_SCHEDULER`, `KBUILD_DIST_TOKEN`, `KBUILD_DIST_TOOLCHAINS`: an sccache-dist
  scheduler's URL, its client token and prepackaged toolchains (kernel_builder.compile.
  dist_compile); `--dist-scheduler`, `--dist-token` override the first two.
- `MAX_JOBS`, `NVCC_THREADS` (torch's names): parallel compiles within one job and nvcc's
  --threads; `--max-jobs`, `--nvcc-threads` override them.
- `KBUILD_OUTPUT_CACHE`, `KBUILD_OUTPUT_CACHE_MODE` (`readwrite` or `read`): the store of built
  variants a build looks its jobs up in and uploads to (kernel_builder.assemble.output_cache);
  `--output-cache`, `--output-cache-mode` override them.
- `KBUILD_CUTLASS_CHECKOUTS`: CUTLASS source folders (os.pathsep-separated, e.g. clones of a
  release tag) kbuild may take a `cutlass_X_Y` release's headers from when no PyPI file carries
  them (kernel_builder.environments.cutlass_headers); only a folder with exactly that release's
  content is used.
- `KBUILD_DOCKER_BASE_IMAGE`: the base of the build images of `--runner docker` when no
  `--base-image` is given (else manylinux_2_28 for the variant's arch).
- `KBUILD_CI_INSTALL`: the pip requirement the CI workflows kbuild writes install kbuild
  with (a platform's own mirror, say), unless `--install` is given; else kbuild's own source.
- `GITHUB_ACTIONS` (`true` on GitHub Actions), `GITHUB_WORKSPACE` (the checkout): a build's
  log gets fold groups and compiler error annotations, paths relative to the checkout.

A variable that must be a choice or a number is parsed when it is used (a property below),
so that a bad MAX_JOBS fails a build with one line naming it, not `kbuild env list`.

Left where they are used: the runtime's variables (kernel_builder.runtime reads its own and
imports no builder module), and the toolchain locations each backend probes beside PATH
(CUDA_HOME, ROCM_PATH, HIP_CLANG_PATH, CXX), which belong with the search they steer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from kernel_builder.errors import UsageError

CACHE_DIR = "KBUILD_CACHE_DIR"
XDG_CACHE_HOME = "XDG_CACHE_HOME"
ENVS_DIR = "KBUILD_ENVS_DIR"
TORCH_INDEX = "KBUILD_TORCH_INDEX"
COMPILER_CACHE = "KBUILD_COMPILER_CACHE"
CCACHE_DIR = "CCACHE_DIR"
SCCACHE_DIR = "SCCACHE_DIR"
CCACHE_BASEDIR = "CCACHE_BASEDIR"
SCCACHE_BASEDIRS = "SCCACHE_BASEDIRS"
DIST_SCHEDULER = "KBUILD_DIST_SCHEDULER"
DIST_TOKEN = "KBUILD_DIST_TOKEN"
DIST_TOOLCHAINS = "KBUILD_DIST_TOOLCHAINS"
MAX_JOBS = "MAX_JOBS"
NVCC_THREADS = "NVCC_THREADS"
CI_INSTALL = "KBUILD_CI_INSTALL"
OUTPUT_CACHE = "KBUILD_OUTPUT_CACHE"
OUTPUT_CACHE_MODE = "KBUILD_OUTPUT_CACHE_MODE"
DOCKER_BASE_IMAGE = "KBUILD_DOCKER_BASE_IMAGE"
CUTLASS_CHECKOUTS = "KBUILD_CUTLASS_CHECKOUTS"
GITHUB_ACTIONS = "GITHUB_ACTIONS"
GITHUB_WORKSPACE = "GITHUB_WORKSPACE"

COMPILER_CACHE_TOOLS = ("ccache", "sccache")  # in order of preference
_COMPILER_CACHE_CHOICES = ("", "auto", "none", *COMPILER_CACHE_TOOLS)
READWRITE, READ = "readwrite", "read"
OUTPUT_CACHE_MODES = (READWRITE, READ)  # read: a build of untrusted code (a fork's pull request) adds nothing


def positive_count(value: int | str | None, name: str) -> int | None:
    """`value` (a flag's or a variable's, called `name` in the error) as a whole number of at
    least 1; None when not given."""
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise UsageError(f"{name} must be a whole number of at least 1, got {value!r}")
    return number


@dataclass(frozen=True)
class KbuildEnvironment:
    """One snapshot of the variables in the module docstring; empty means unset."""

    cache_dir: Path | None = None
    xdg_cache_home: Path | None = None
    envs_dir: Path | None = None
    torch_index: str | None = None
    ccache_dir: Path | None = None
    sccache_dir: Path | None = None
    ccache_basedir: str | None = None
    sccache_basedirs: str = ""  # SCCACHE_BASEDIRS: the user's own, kept beside kbuild's
    dist_scheduler: str | None = None
    dist_token: str | None = None
    dist_toolchains: str | None = None
    compiler_cache_text: str = ""  # KBUILD_COMPILER_CACHE, lower-cased: see `compiler_cache`
    max_jobs_text: str = ""
    nvcc_threads_text: str = ""
    ci_install: str | None = None
    output_cache: str | None = None
    output_cache_mode_text: str = ""  # KBUILD_OUTPUT_CACHE_MODE, lower-cased: see `output_cache_mode`
    docker_base_image: str | None = None
    cutlass_checkouts: tuple[Path, ...] = ()
    github_actions: bool = False
    github_workspace: Path | None = None

    @property
    def compiler_cache(self) -> str | None:
        """"ccache", "sccache" or "none"; None lets kbuild pick whichever is installed."""
        if self.compiler_cache_text not in _COMPILER_CACHE_CHOICES:
            raise UsageError(
                f"{COMPILER_CACHE} must be one of ccache, sccache, none (or unset), got {self.compiler_cache_text!r}")
        return None if self.compiler_cache_text in ("", "auto") else self.compiler_cache_text

    @property
    def output_cache_mode(self) -> str | None:
        """"readwrite" or "read"; None when unset."""
        if self.output_cache_mode_text and self.output_cache_mode_text not in OUTPUT_CACHE_MODES:
            raise UsageError(
                f"{OUTPUT_CACHE_MODE} must be one of {', '.join(OUTPUT_CACHE_MODES)} (or unset), got {self.output_cache_mode_text!r}")
        return self.output_cache_mode_text or None

    @property
    def max_jobs(self) -> int | None:
        return positive_count(self.max_jobs_text, MAX_JOBS)

    @property
    def nvcc_threads(self) -> int | None:
        return positive_count(self.nvcc_threads_text, NVCC_THREADS)

    def tool_cache_dir(self, tool: str) -> Path | None:
        """The user's own folder for compiler cache `tool` ($CCACHE_DIR or $SCCACHE_DIR)."""
        return {"ccache": self.ccache_dir, "sccache": self.sccache_dir}.get(tool)


def read_environment(environ: Mapping[str, str] | None = None) -> KbuildEnvironment:
    """The variables now (`environ`, default os.environ)."""
    environ = os.environ if environ is None else environ

    def text(name: str) -> str | None:
        return environ.get(name) or None

    def path(name: str) -> Path | None:
        value = text(name)
        return Path(value) if value else None

    return KbuildEnvironment(
        cache_dir=path(CACHE_DIR),
        xdg_cache_home=path(XDG_CACHE_HOME),
        envs_dir=path(ENVS_DIR),
        torch_index=text(TORCH_INDEX),
        ccache_dir=path(CCACHE_DIR),
        sccache_dir=path(SCCACHE_DIR),
        ccache_basedir=text(CCACHE_BASEDIR),
        sccache_basedirs=environ.get(SCCACHE_BASEDIRS, ""),
        dist_scheduler=text(DIST_SCHEDULER),
        dist_token=text(DIST_TOKEN),
        dist_toolchains=text(DIST_TOOLCHAINS),
        compiler_cache_text=environ.get(COMPILER_CACHE, "").strip().lower(),
        max_jobs_text=environ.get(MAX_JOBS, ""),
        nvcc_threads_text=environ.get(NVCC_THREADS, ""),
        ci_install=text(CI_INSTALL),
        output_cache=text(OUTPUT_CACHE),
        output_cache_mode_text=environ.get(OUTPUT_CACHE_MODE, "").strip().lower(),
        docker_base_image=text(DOCKER_BASE_IMAGE),
        cutlass_checkouts=tuple(Path(p) for p in environ.get(CUTLASS_CHECKOUTS, "").split(os.pathsep) if p),
        github_actions=environ.get(GITHUB_ACTIONS, "") == "true",
        github_workspace=path(GITHUB_WORKSPACE),
    )
