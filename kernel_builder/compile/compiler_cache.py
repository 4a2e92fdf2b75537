"""The compiler cache (ccache or sccache) that launches every compile, and its hit count.

The cache becomes CMake's `CMAKE_<LANG>_COMPILER_LAUNCHER` for each language of the
project (nvcc included), passed at configure time beside the generated project rather
than in it: a launcher appearing or going away changes no input hash, so it never makes
a variant out of date (Ninja may still recompile, with the new command line).

One cache folder serves every variant: `$CCACHE_DIR` (or `$SCCACHE_DIR`) when set, else
`<kbuild cache dir>/ccache` (or `sccache`). `KBUILD_COMPILER_CACHE=ccache|sccache|none`
picks the tool; `kbuild build --compiler-cache/--no-compiler-cache` overrides that.

Example:
    >>> cache = find_compiler_cache()
    >>> launcher_settings(cache, ("CXX", "CUDA"))
    {'CMAKE_CXX_COMPILER_LAUNCHER': '/usr/bin/ccache', 'CMAKE_CUDA_COMPILER_LAUNCHER': '/usr/bin/ccache'}
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from kernel_builder.errors import UsageError
from kernel_builder.paths import cache_dir
from kernel_builder.settings import COMPILER_CACHE_TOOLS, read_environment

# The CMake languages that take a compiler launcher.
LAUNCHED_LANGUAGES = ("C", "CXX", "CUDA", "HIP", "OBJC", "OBJCXX")

# ccache (>= 4.4) appends one record per compile to CCACHE_STATSLOG: a "# <source>"
# line, then the statistics it counted. 4.7 spells them as IDs; older releases as text.
_HIT_LINES = {"direct_cache_hit", "preprocessed_cache_hit", "cache hit (direct)", "cache hit (preprocessed)"}
_MISS_LINES = {"cache_miss", "cache miss"}


@dataclass(frozen=True)
class CacheStats:
    """How the compiles of one job went: served from the cache (hits) or compiled (misses)."""

    tool: str
    hits: int
    misses: int

    @property
    def rate(self) -> float:
        return self.hits / (self.hits + self.misses)

    def describe(self) -> str:
        return f"{self.tool} {self.hits}/{self.hits + self.misses} hits"


@dataclass(frozen=True)
class CompilerCache:
    tool: str  # "ccache" | "sccache"
    path: str  # the executable
    directory: Path  # the one cache folder shared by every variant

    def job_environment(self, work_dir: Path) -> dict[str, str]:
        """Variables for the compile step of the job in `work_dir`, whose stats log starts
        empty. ccache rewrites paths under the kernel's work trees relative to the build
        folder, so a fresh work tree of the same kernel still hits; a user's own
        CCACHE_BASEDIR wins."""
        if self.tool == "sccache":
            # sccache's server reads SCCACHE_DIR when it starts; a running one keeps its own.
            return {"SCCACHE_DIR": str(self.directory)}
        stats_log(work_dir).unlink(missing_ok=True)
        return {
            "CCACHE_DIR": str(self.directory),
            "CCACHE_BASEDIR": read_environment().ccache_basedir or str(work_dir.parent),
            "CCACHE_STATSLOG": str(stats_log(work_dir)),
        }

    def job_stats(self, work_dir: Path) -> CacheStats | None:
        """Hits and misses of the job in `work_dir`; None when nothing was compiled or the
        tool keeps no per-job log (sccache: its server counts for every client at once)."""
        if self.tool != "ccache":
            return None
        try:
            lines = [line.strip() for line in stats_log(work_dir).read_text(errors="replace").splitlines()]
        except OSError:
            return None
        hits = sum(line in _HIT_LINES for line in lines)
        misses = sum(line in _MISS_LINES for line in lines)
        return CacheStats(self.tool, hits, misses) if hits + misses else None


def stats_log(work_dir: Path) -> Path:
    """ccache's record of one job's compiles (the global statistics are left alone)."""
    return work_dir / "ccache-stats.log"


def launcher_settings(cache: CompilerCache | None, languages: tuple[str, ...]) -> dict[str, str]:
    """`CMAKE_<LANG>_COMPILER_LAUNCHER` for each launched language of the project; empty
    values without a cache, so that an existing build tree drops a launcher it had."""
    value = cache.path if cache else ""
    return {f"CMAKE_{lang}_COMPILER_LAUNCHER": value for lang in languages if lang in LAUNCHED_LANGUAGES}


def find_compiler_cache(enabled: bool | None = None) -> CompilerCache | None:
    """The compiler cache to use. `enabled` is the command line's choice (None: not given);
    then KBUILD_COMPILER_CACHE; then whichever of ccache, sccache is on PATH, if any.
    Asking for a tool that is missing is an error that says how to get it."""
    environment = read_environment()
    setting = environment.compiler_cache  # a bad value fails here, even with `enabled` given
    if enabled is False or (enabled is None and setting == "none"):
        return None
    wanted = (setting,) if setting in COMPILER_CACHE_TOOLS else COMPILER_CACHE_TOOLS
    for tool in wanted:
        path = shutil.which(tool)
        if path:
            return CompilerCache(tool, path, environment.tool_cache_dir(tool) or cache_dir(tool))
    if enabled or setting in COMPILER_CACHE_TOOLS:
        names = " or ".join(wanted)
        raise UsageError(
            f"no compiler cache: {names} is not on PATH; install it (e.g. apt-get install ccache) "
            "or build with --no-compiler-cache")
    return None
