"""The options of one build, resolved once: `BuildOptions`.

Each option has one name from flag to use (`--import-check` is `import_check` here, in
kernel_builder.runners.base.BuildSettings and in kernel_builder.checks.variant_checks)
and one default, the one below, which `kbuild build`'s flags show. The CLI makes one
`BuildOptions` from its flags; kernel_builder.pipeline.build_kernel.build_kernel takes it.
Values that are wrong on their own fail when it is made, with one line naming the flag.

The environment variables that stand in for some flags (MAX_JOBS for --max-jobs,
KBUILD_COMPILER_CACHE for --compiler-cache, ...) are read by kernel_builder.settings.

Example:
    >>> options = BuildOptions(matrix="backend=cpu", jobs=2, import_check=False)
    >>> build_kernel(Path("relu"), options)
"""

from __future__ import annotations

import re
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Callable

from kernel_builder.compile.compiler_cache import CacheRequest
from kernel_builder.environments.choice import EnvChooser
from kernel_builder.errors import UsageError, VariantError
from kernel_builder.runners import get_runner
from kernel_builder.settings import OUTPUT_CACHE_MODES, positive_count
from kernel_builder.variants import Style


@dataclass(frozen=True)
class BuildOptions:
    """Every option of one `kbuild build`, named after its flag."""

    # Which variants: exactly `variants` (--variant), or the `matrix` selection, optionally
    # one `shard` of it (--matrix, --shard), else this machine's.
    variants: tuple[str, ...] = ()
    matrix: str | None = None
    shard: str | None = None
    # --variant-names: the naming style of the variants kbuild picks; None is legacy, but
    # only an explicit style refuses a --variant spelled in the other one.
    variant_names: str | None = None
    out: Path | None = None  # --out: the output folder (None: KERNEL_DIR/build)
    # The build environments (--env, --create-env, --torch-index).
    env: Path | None = None
    create_env: bool = True
    torch_index: str | None = None
    # How much at once (--jobs: variants; --max-jobs, --nvcc-threads: compiles within one);
    # None derives them from cores and memory.
    jobs: int | None = None
    max_jobs: int | None = None
    nvcc_threads: int | None = None
    # --compiler-cache/--no-compiler-cache (None uses one when installed); made a
    # CacheRequest of the four below when --compiler-cache-tool or --dist-scheduler is given.
    compiler_cache: bool | CacheRequest | None = None
    compiler_cache_tool: str | None = None  # --compiler-cache-tool: ccache or sccache
    dist_scheduler: str | None = None  # --dist-scheduler: an sccache-dist scheduler's URL
    dist_token: str | None = None  # --dist-token: its client token
    dist_fallback_local: bool = False  # --dist-fallback-local: compile here when it does not answer
    fail_fast: bool = False  # --fail-fast: start no job once one failed
    import_check: bool = True  # --import-check: import each new variant before installing it
    strict_abi: bool = False  # --strict-abi: symbol versions beyond manylinux_2_28 fail a variant
    runner: str = "local"  # --runner: local or docker (kernel_builder.runners; each says which options it honours)
    base_image: str | None = None  # --base-image: the docker runner's base (default: $KBUILD_DOCKER_BASE_IMAGE, manylinux)
    # --cuda-arch: compile CUDA variants for these architectures only ("9.0" or "8.0,9.0"; a
    # development build, `kbuild dev`), in a work tree of their own; () compiles the kernel's list.
    cuda_arch: tuple[str, ...] | str = ()
    # --output-cache: a store of built variants keyed by input id (a folder or an fsspec URL;
    # None: KBUILD_OUTPUT_CACHE); --output-cache-mode: readwrite, or read (adds nothing).
    output_cache: str | None = None
    output_cache_mode: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "variants", tuple(self.variants))  # a list from a caller
        for count, flag in ((self.jobs, "--jobs"), (self.max_jobs, "--max-jobs"), (self.nvcc_threads, "--nvcc-threads")):
            positive_count(count, flag)
        if self.matrix is not None and self.variants:
            raise VariantError("--matrix and --variant both choose the variants; use one of them")
        if self.variant_names is not None:
            Style.parse(self.variant_names)
        object.__setattr__(self, "cuda_arch", parse_cuda_arch(self.cuda_arch))
        if self.output_cache_mode is not None and self.output_cache_mode not in OUTPUT_CACHE_MODES:
            raise UsageError(f"--output-cache-mode must be one of {', '.join(OUTPUT_CACHE_MODES)}, got {self.output_cache_mode!r}")
        # An option the runner cannot honour fails here, in one line naming both.
        get_runner(self.runner).check(self.given_flags())
        object.__setattr__(self, "compiler_cache", self._cache_choice())

    def given_flags(self) -> dict[str, object]:
        """The options set to other than their defaults, by the flag that sets them
        (`--no-import-check` for import_check=False)."""
        given = {}
        for option in fields(self):
            value = getattr(self, option.name)
            default = option.default if option.default is not MISSING else None
            if value == default or (value == () and default in ((), None)):
                continue
            flag = "variant" if option.name == "variants" else option.name.replace("_", "-")
            given[f"--no-{flag}" if value is False else f"--{flag}"] = value
        return given

    def _cache_choice(self) -> bool | CacheRequest | None:
        if self.compiler_cache_tool is None and self.dist_scheduler is None:
            if self.dist_token is not None or self.dist_fallback_local:
                raise UsageError("--dist-token and --dist-fallback-local go with --dist-scheduler URL")
            return self.compiler_cache
        if self.compiler_cache is False:
            raise UsageError("--no-compiler-cache turns sccache off: drop it to use --compiler-cache-tool or --dist-scheduler")
        if isinstance(self.compiler_cache, CacheRequest):
            return self.compiler_cache
        return CacheRequest(self.compiler_cache_tool, self.dist_scheduler, self.dist_token, self.dist_fallback_local)

    def env_chooser(self, say: Callable[[str], None] = lambda message: None) -> EnvChooser:
        """The build environments these options ask for (probes --env); `say` hears of
        environments being created."""
        return EnvChooser.from_options(self.env, create=self.create_env, index=self.torch_index, say=say)


def parse_cuda_arch(value: tuple[str, ...] | str) -> tuple[str, ...]:
    """--cuda-arch "8.0,9.0a" (or a tuple of them) as ("8.0", "9.0a"); anything else is a
    one-line UsageError naming the flag."""
    archs = tuple(a.strip() for a in (value.split(",") if isinstance(value, str) else value) if a.strip())
    for arch in archs:
        if not re.fullmatch(r"\d+\.\d+[a-z]?", arch):
            raise UsageError(f"--cuda-arch takes compute capabilities such as 9.0 or 8.0,9.0a, got {arch!r}")
    return tuple(dict.fromkeys(archs))
