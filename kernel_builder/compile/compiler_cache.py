"""The compiler cache (ccache or sccache) that launches every compile, and its hit count.

The cache becomes CMake's `CMAKE_<LANG>_COMPILER_LAUNCHER` for each language of the
project (nvcc included), passed at configure time beside the generated project rather
than in it: a launcher appearing or going away changes no input hash, so it never makes
a variant out of date (Ninja may still recompile, with the new command line).

One cache folder serves every variant: `$CCACHE_DIR` (or `$SCCACHE_DIR`) when set, else
`<kbuild cache dir>/ccache` (or `sccache`). `KBUILD_COMPILER_CACHE=ccache|sccache|none`
picks the tool; `kbuild build --compiler-cache/--no-compiler-cache` and
`--compiler-cache-tool` override that.

sccache can share one cache between machines (a remote backend set by its own SCCACHE_*
variables: kernel_builder.compile.remote_cache) and send compiles to an sccache-dist
scheduler (kernel_builder.compile.dist_compile); kbuild runs its servers
(kernel_builder.compile.sccache_server) and reports each job's hits, remote ones included.

Example:
    >>> cache = find_compiler_cache()
    >>> launcher_settings(cache, ("CXX", "CUDA"))
    {'CMAKE_CXX_COMPILER_LAUNCHER': '/usr/bin/ccache', 'CMAKE_CUDA_COMPILER_LAUNCHER': '/usr/bin/ccache'}
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from kernel_builder.compile import sccache_server
from kernel_builder.compile.dist_compile import DistSettings, scheduler_problem
from kernel_builder.compile.remote_cache import remote_backend
from kernel_builder.redaction import mask_credentials
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
    location: str = ""  # where the hits came from, as sccache names it (e.g. "redis, name: redis://...")
    distributed: int = 0  # misses compiled by sccache-dist build servers

    @property
    def rate(self) -> float:
        return self.hits / (self.hits + self.misses)

    def describe(self) -> str:
        where = f" from {self.location}" if self.location else ""
        farm = f", {self.distributed} compiled remotely" if self.distributed else ""
        return f"{self.tool} {self.hits}/{self.hits + self.misses} hits{where}{farm}"


@dataclass(frozen=True)
class CacheRequest:
    """What `kbuild build` asks of the compiler cache beyond on or off (BuildOptions.compiler_cache)."""

    tool: str | None = None  # --compiler-cache-tool: ccache or sccache; None: KBUILD_COMPILER_CACHE, else installed
    dist_scheduler: str | None = None  # --dist-scheduler (else KBUILD_DIST_SCHEDULER)
    dist_token: str | None = None  # --dist-token (else KBUILD_DIST_TOKEN)
    dist_fallback_local: bool = False  # --dist-fallback-local: compile here when the scheduler does not answer

    def __post_init__(self) -> None:
        if self.tool is not None and self.tool not in COMPILER_CACHE_TOOLS:
            raise UsageError(f"--compiler-cache-tool must be one of {', '.join(COMPILER_CACHE_TOOLS)}, got {self.tool!r}")
        if self.dist_scheduler is not None and self.tool == "ccache":
            raise UsageError("--dist-scheduler sends compiles through sccache-dist: use --compiler-cache-tool sccache")


@dataclass(frozen=True)
class CompilerCache:
    tool: str  # "ccache" | "sccache"
    path: str  # the executable
    directory: Path  # the one cache folder shared by every variant (sccache: unless a remote backend is set)
    dist: DistSettings | None = None  # sccache-dist's scheduler, when it answered
    dist_problem: str = ""  # why a scheduler that was asked for is not used (--dist-fallback-local)

    @property
    def shared_beyond_this_machine(self) -> bool:
        """Whether other machines read what this one compiles (a remote backend) or compile
        for it (sccache-dist): then a job's compiles must name the same paths on every
        runner (kernel_builder.compile.fixed_paths)."""
        return self.tool == "sccache" and (self.dist is not None or remote_backend() is not None)

    def job_environment(self, work_dir: Path) -> dict[str, str]:
        """Variables for the compile step of the job in `work_dir` (sccache: a server of
        its own is started), whose figures start at zero. ccache rewrites paths under the
        kernel's work trees relative to the build folder, so a fresh work tree of the same
        kernel still hits; a user's own CCACHE_BASEDIR wins."""
        if self.tool == "sccache":
            return self._sccache_environment(work_dir)
        stats_log(work_dir).unlink(missing_ok=True)
        return {
            "CCACHE_DIR": str(self.directory),
            "CCACHE_BASEDIR": read_environment().ccache_basedir or str(work_dir.parent),
            "CCACHE_STATSLOG": str(stats_log(work_dir)),
        }

    def _sccache_environment(self, work_dir: Path) -> dict[str, str]:
        settings = {"SCCACHE_DIR": str(self.directory)}
        if not self.shared_beyond_this_machine:
            return sccache_server.join_shared_server(self.path, work_dir, settings)
        # Shared beyond this machine: the keys must not depend on where this runner keeps
        # the checkout, the work trees or the build environment.
        own = [d for d in read_environment().sccache_basedirs.split(":") if d]
        settings[sccache_server.BASEDIRS] = ":".join(dict.fromkeys(own + sccache_server.project_base_dirs(work_dir)))
        if self.dist is not None:
            settings["SCCACHE_CONF"] = str(self.dist.write_config())
        return sccache_server.start_job_server(self.path, work_dir, settings)

    def job_stats(self, work_dir: Path) -> CacheStats | None:
        """Hits and misses of the job in `work_dir`; None when nothing was compiled (or,
        on sccache's one local server, another job compiled at the same time)."""
        if self.tool == "sccache":
            counts = sccache_server.finish_job(self.path, work_dir)
            if counts is None:
                return None
            return CacheStats(self.tool, counts.hits, counts.misses, mask_credentials(counts.location), counts.distributed)
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


def find_compiler_cache(enabled: bool | CacheRequest | None = None) -> CompilerCache | None:
    """The compiler cache to use. `enabled` is the command line's choice (None: not given;
    a CacheRequest: on, with its tool and scheduler); then KBUILD_COMPILER_CACHE and
    KBUILD_DIST_SCHEDULER; then whichever of ccache, sccache is on PATH, if any. Asking
    for a tool that is missing, or a scheduler that does not answer (without
    dist_fallback_local), is an error that says what to do."""
    environment = read_environment()
    setting = environment.compiler_cache  # a bad value fails here, even with `enabled` given
    request = enabled if isinstance(enabled, CacheRequest) else CacheRequest()
    scheduler = request.dist_scheduler or environment.dist_scheduler
    if enabled is False or (enabled is None and setting == "none" and not scheduler):
        return None
    if request.tool:
        setting = request.tool
    elif scheduler:
        setting = "sccache"  # the one with distributed compiles
    wanted = (setting,) if setting in COMPILER_CACHE_TOOLS else COMPILER_CACHE_TOOLS
    for tool in wanted:
        path = shutil.which(tool)
        if path:
            cache = CompilerCache(tool, path, environment.tool_cache_dir(tool) or cache_dir(tool))
            return _with_scheduler(cache, scheduler, request) if scheduler else cache
    if enabled or setting in COMPILER_CACHE_TOOLS:
        names = " or ".join(wanted)
        how = " or ".join(_INSTALL[tool] for tool in wanted)
        raise UsageError(f"no compiler cache: {names} is not on PATH; install it ({how}) or build with --no-compiler-cache")
    return None


_INSTALL = {"ccache": "apt-get install ccache", "sccache": "pip install sccache"}


def _with_scheduler(cache: CompilerCache, url: str, request: CacheRequest) -> CompilerCache:
    environment = read_environment()
    dist = DistSettings(url, request.dist_token or environment.dist_token or "", environment.dist_toolchains or "")
    problem = scheduler_problem(dist)
    if problem is None:
        return replace(cache, dist=dist)
    if not request.dist_fallback_local:
        raise UsageError(f"{problem}; start it, fix --dist-scheduler, or add --dist-fallback-local to compile here")
    return replace(cache, dist_problem=problem)
