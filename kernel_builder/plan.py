"""Manifest x build environment -> one BuildJob per variant, plus the skips and their reasons."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernel_builder.backends import Unavailable
from kernel_builder.cache import cache_dir, short_key
from kernel_builder.envs import BuildEnv
from kernel_builder.errors import VariantError
from kernel_builder.host import backend_targets
from kernel_builder.inputs import content_hash, input_files
from kernel_builder.manifest import Manifest
from kernel_builder.provenance import GitState, git_state
from kernel_builder.variants import Kind, Variant, noarch_variant, parse_version


@dataclass(frozen=True)
class BuildJob:
    manifest: Manifest
    env: BuildEnv
    variant: Variant
    backend: str
    kernel_id: str  # 7 hex digits of the source tree hash, `_dirty` appended when dirty
    source: GitState | None
    out_dir: Path  # the build/ folder; the job writes out_dir/<variant>/
    work_dir: Path  # the generated CMake project and its build tree (in the cache)

    @property
    def ops_name(self) -> str:
        """The hash-suffixed op namespace: `_<name>_<backend>_<id>`."""
        return f"_{self.manifest.python_name}_{self.backend}_{self.kernel_id}"

    @property
    def library_name(self) -> str:
        return f"{self.ops_name}.abi3.so"

    @property
    def compiled(self) -> bool:
        return self.variant.kind is not Kind.NOARCH

    @property
    def dest(self) -> Path:
        return self.out_dir / self.variant.name

    @property
    def log_file(self) -> Path:
        return self.work_dir / "build.log"


@dataclass(frozen=True)
class Skip:
    backend: str
    reason: str


@dataclass(frozen=True)
class Plan:
    jobs: tuple[BuildJob, ...]
    skips: tuple[Skip, ...]


def kernel_identity(manifest: Manifest, out_dir: Path) -> tuple[str, GitState | None]:
    """(id, git state): git's tree hash of the kernel folder, else a hash of its inputs."""
    state = git_state(manifest.root, exclude=(out_dir,))
    if state is not None and state.tree:
        return state.tree[:7] + ("_dirty" if state.dirty else ""), state
    files = input_files(manifest)
    suffix = "_dirty" if state is not None and state.dirty else ""
    return content_hash(manifest.root, files)[:7] + suffix, state


def _torch_bounds_skip(manifest: Manifest, env: BuildEnv) -> str | None:
    torch = manifest.torch
    if torch is None:
        return None
    have = env.torch
    if torch.minver and have < parse_version(torch.minver):
        return f"[torch] minver {torch.minver} excludes the build environment's torch {env.torch_version}"
    if torch.maxver and have > parse_version(torch.maxver):
        return f"[torch] maxver {torch.maxver} excludes the build environment's torch {env.torch_version}"
    return None


def plan_build(
    manifest: Manifest, env: BuildEnv, out_dir: Path, requested: tuple[str, ...] = ()
) -> Plan:
    """The jobs this environment can run for `manifest`; with `requested`, exactly those."""
    kernel_id, source = kernel_identity(manifest, out_dir)
    work_root = cache_dir("work", short_key(str(manifest.root.resolve())))
    targets: dict[str, Variant] = {}
    skips: list[Skip] = []
    bounds = _torch_bounds_skip(manifest, env)
    for backend in manifest.general.backends:
        if manifest.noarch is not None:
            targets[backend] = noarch_variant(backend)
            continue
        if bounds:
            skips.append(Skip(backend, bounds))
            continue
        target = backend_targets(env, manifest, (backend,))[backend]
        if isinstance(target, Unavailable):
            skips.append(Skip(backend, target.reason))
        else:
            targets[backend] = target

    def job(backend: str, variant: Variant) -> BuildJob:
        return BuildJob(manifest, env, variant, backend, kernel_id, source, out_dir, work_root / variant.name)

    if not requested:
        return Plan(tuple(job(b, v) for b, v in targets.items()), tuple(skips))

    jobs = []
    for name in requested:
        wanted = Variant.parse(name)
        if wanted.backend not in manifest.general.backends:
            raise VariantError(
                f"cannot build {name}: kernel '{manifest.name}' does not list backend "
                f"'{wanted.backend}' in [general] backends"
            )
        have = targets.get(wanted.backend)
        if have is None:
            reason = next(s.reason for s in skips if s.backend == wanted.backend)
            raise VariantError(f"cannot build {name} here: {reason}")
        if have != wanted:
            raise VariantError(
                f"cannot build {name} here: the build environment ({env.describe()}) builds {have.name}"
            )
        jobs.append(job(wanted.backend, wanted))
    unique = {j.variant.name: j for j in jobs}
    return Plan(tuple(unique.values()), ())
