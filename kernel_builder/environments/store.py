"""Managed build environments: one cached virtual environment per (torch version, compute).

kbuild builds a variant with the running interpreter when its torch matches; otherwise it
needs another interpreter with that torch. This module keeps those under `envs_root()`,
one per EnvSpec key:

    <root>/torch214-cu130/                  the venv, usable only once its marker exists
    <root>/torch214-cu130/kbuild-env.json   the marker, written last: what was asked, what came
    <root>/torch214-cu130.log               pip's output, outside the venv so a failure keeps it
    <root>/torch214-cu130.lock              flock held while checking and creating
    <root>/torch214-cpu-aarch64/            another architecture's torch, for cross builds
                                            (kernel_builder.environments.cross_env); PyPI's one
                                            flavour, so it serves that torch's CUDA variants too
    <root>/torch214-aarch64.lock            their creation lock, one per torch and architecture

A folder without the marker is a creation that was killed half-way: it is never used,
the next creation replaces it and `prune` always removes it.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import sys
import tomllib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from importlib import resources
from pathlib import Path
from typing import Callable, Sequence

from kernel_builder.paths import cache_dir
from kernel_builder.environments import cross_env, download_cost, pip_run
from kernel_builder.environments.probe import BuildEnv, probe_env
from kernel_builder.errors import EnvironmentCreateError, EnvironmentProbeError, KbuildError, VariantError
from kernel_builder.file_lock import exclusive_lock
from kernel_builder.redaction import mask_credentials
from kernel_builder.settings import read_environment
from kernel_builder.backend_facts import ALL as ALL_FACTS, FALLBACK, label, parse_compute, version_pair
from kernel_builder.environments.cross_target import TARGETS, target_for
from kernel_builder.variants import Variant, try_parse, xpu_version

MARKER = "kbuild-env.json"
PROBE_FILE = "kbuild-probe.json"  # what the environment's torch is (environments.probe)
_LAST_USED = ".kbuild-last-used"  # its mtime is the last time kbuild handed the env out
_KEY_RE = re.compile(r"^torch(\d)(\d+)-([a-z0-9]+)(?:-(%s))?$" % "|".join(TARGETS))
# Variants of these computes compile against any torch flavour of the right version
# (a CPU extension builds fine against a CUDA torch; macOS has one flavour only).
_ANY_FLAVOUR = tuple(f.name for f in ALL_FACTS if f.compiled and not f.versioned)


def compute_tag(env: BuildEnv) -> str:
    """The variant compute tag of an environment's torch: cpu, cu130, rocm71, xpu20261."""
    for record in ALL_FACTS:
        text = getattr(env, record.torch_attribute) if record.torch_attribute else None
        if text:
            # "13.0"; ROCm's "7.1.25424-..." -> rocm71; XPU's "20250101" (YYYYMMPP) -> xpu20251
            version = version_pair(text) or xpu_version(text)
            return record.compute(version)
    return FALLBACK


def describe_compute(compute: str | None) -> str:
    """cu130 -> 'CUDA 13.0', cpu -> 'CPU'; None (an environment whose spec this kbuild cannot
    read, e.g. one a newer kbuild made) -> 'compute unknown'."""
    if compute is None:
        return "compute unknown"
    parsed = parse_compute(compute)
    return compute if parsed is None else label(*parsed)


@dataclass(frozen=True)
class EnvSpec:
    """What a build environment must have: torch major.minor and its compute flavour, and
    `arch` for another architecture's torch (a cross build's; None: this machine's)."""

    torch: tuple[int, int]
    compute: str
    arch: str | None = None

    def __post_init__(self) -> None:
        if parse_compute(self.compute) is None:
            raise VariantError(f"'{self.compute}' is not a compute tag; expected e.g. cpu, cu130, rocm71 or xpu20260")

    @property
    def key(self) -> str:
        """The folder name: torch214-cu130, torch214-cpu-aarch64."""
        return f"torch{self.torch[0]}{self.torch[1]}-{self.compute}" + (f"-{self.arch}" if self.arch else "")

    @classmethod
    def for_variant(cls, variant: Variant) -> "EnvSpec":
        if variant.torch is None:
            raise VariantError(f"{variant.name} is pure Python: it needs no build environment")
        target = target_for(variant.platform)
        return cls(variant.torch, variant.compute, target.arch if target else None)

    @classmethod
    def from_key(cls, key: str) -> "EnvSpec | None":
        """torch214-cu130 -> EnvSpec((2, 14), 'cu130'); None for anything else."""
        m = _KEY_RE.match(key)
        if not m or parse_compute(m.group(3)) is None:
            return None
        return cls((int(m.group(1)), int(m.group(2))), m.group(3), m.group(4))

    @classmethod
    def parse(cls, name: str) -> "EnvSpec":
        """An environment key (torch214-cu130) or a variant name (torch214-cxx11-cu130-x86_64-linux)."""
        spec = cls.from_key(name)
        if spec is not None:
            return spec
        variant = try_parse(name)
        if variant is None or variant.torch is None:
            raise VariantError(
                f"'{name}' is neither an environment key (e.g. torch214-cu130) nor a variant name "
                "(e.g. torch214-cxx11-cu130-x86_64-linux)"
            )
        return cls.for_variant(variant)

    def satisfied_by(self, env: BuildEnv) -> bool:
        if env.torch != self.torch or env.arch != self.arch:
            return False
        return self.compute in _ANY_FLAVOUR or compute_tag(env) == self.compute

    def describe(self) -> str:
        """'torch 2.14 (CUDA 13.0)', 'torch 2.14 (CPU) for aarch64'."""
        text = f"torch {self.torch[0]}.{self.torch[1]} ({describe_compute(self.compute)})"
        return f"{text} for {self.arch}" if self.arch else text


# -- where torch comes from -----------------------------------------------------------
@functools.cache
def _index_table() -> dict:
    text = resources.files("kernel_builder").joinpath("data/matrix.toml").read_text()
    return tomllib.loads(text)["torch-index"]


def pypi_flavour(torch: tuple[int, int]) -> str | None:
    """The compute flavour PyPI itself serves of a torch release (cu130 for 2.14), or None."""
    return _index_table()["pypi-cuda"].get(f"{torch[0]}.{torch[1]}")


def pip_request(spec: EnvSpec, index: str | None = None) -> tuple[str, str | None]:
    """The pip requirement for spec's torch and the index URL to install it from.

    The URL is `index`, else $KBUILD_TORCH_INDEX, else None (pip's own configured indexes)
    when any flavour will do or PyPI serves this one, else PyTorch's index for the flavour.
    """
    version = f"{spec.torch[0]}.{spec.torch[1]}"
    requirement = f"torch=={version}.*"
    index = index or read_environment().torch_index
    if index or spec.compute in _ANY_FLAVOUR:
        return requirement, index
    if pypi_flavour(spec.torch) == spec.compute:
        return requirement, None
    backend, (major, minor) = parse_compute(spec.compute)  # type: ignore[misc]
    return requirement, _index_table()[backend].format(compute=spec.compute, major=major, minor=minor)


# A wheelhouse (pip's find-links) or a mirror may hold another flavour of the release PyPI
# serves, under a local label: 2.13.0+cpu beside PyPI's CUDA 13.0 2.13.0. pip ranks the
# labelled one higher, so `torch==2.13.*` alone would install the CPU build.
_MAX_EXCLUSIONS = 3


def narrowed_requirement(spec: EnvSpec, index: str | None = None, cached_only: bool = False) -> str:
    """spec's pip requirement with each release of another flavour that pip's configured
    sources would pick first excluded by name (`torch==2.13.*,!=2.13.0+cpu`), found by dry
    runs, so pip falls through to the flavour PyPI serves. Where nothing is left after an
    exclusion, the last requirement stays, and the flavour check reports what it offers.
    Unchanged where an index is named or any flavour will do."""
    requirement, url = pip_request(spec, index)
    if url is not None or spec.compute in _ANY_FLAVOUR or pypi_flavour(spec.torch) != spec.compute:
        return requirement
    torch = _offered_torch(requirement, cached_only)
    for _ in range(_MAX_EXCLUSIONS):
        if torch is None or "+" not in torch.version or _compute_of(torch, spec) == spec.compute:
            return requirement
        narrower = f"{requirement},!={torch.version}"
        torch = _offered_torch(narrower, cached_only)
        if torch is None:
            return requirement
        requirement = narrower
    return requirement


# -- the store ----------------------------------------------------------------------------
def envs_root() -> Path:
    configured = read_environment().envs_dir
    if configured is None:
        return cache_dir("venvs")
    root = configured.absolute()
    root.mkdir(parents=True, exist_ok=True)
    return root


def _python(path: Path) -> Path:
    return path / "bin" / "python"


def _usable(path: Path, spec: EnvSpec) -> BuildEnv | None:
    if not (path / MARKER).is_file():
        return None  # being created, or its creation was killed
    if spec.arch:  # another architecture's torch: read, never run
        env = cross_env.read_env(path)
        return env if env is not None and spec.satisfied_by(env) else None
    try:
        env = probe_env(_python(path), path / PROBE_FILE)  # cached: two stat calls once probed
    except EnvironmentProbeError:
        return None  # broken, e.g. its base interpreter is gone: ensure_env recreates it
    return env if spec.satisfied_by(env) else None


def find_env(spec: EnvSpec) -> BuildEnv | None:
    """A complete managed environment for spec; for CPU specs, one of any flavour will do.
    Another architecture's torch is the one flavour PyPI serves for it (2.12-2.14 for aarch64:
    CUDA 13.0 builds), whatever key asked for it: a CUDA spec takes the CPU spec's environment
    when its torch is that flavour, so both share one torch and one 3 GB emulation layer."""
    root = envs_root()
    keys = [spec.key]
    if spec.compute in _ANY_FLAVOUR or spec.arch:
        prefix = f"torch{spec.torch[0]}{spec.torch[1]}-"
        keys += sorted(p.name for p in root.iterdir() if p.name.startswith(prefix) and p.is_dir() and p.name != spec.key
                       and getattr(EnvSpec.from_key(p.name), "arch", None) == spec.arch)
    for key in keys:
        env = _usable(root / key, spec)
        if env is not None:
            (root / key / _LAST_USED).touch()
            return env
    return None


def managed_specs() -> list[EnvSpec]:
    """What the store's folder names promise, complete or not: a cheap listing, by name only."""
    root = envs_root()
    return [spec for p in root.iterdir() if (spec := EnvSpec.from_key(p.name)) is not None and p.is_dir()]


def _lock_key(spec: EnvSpec) -> str:
    """One lock per torch and architecture for cross environments, which serve each other's
    flavours (find_env): a CPU and a CUDA build starting together make one, not two."""
    return f"torch{spec.torch[0]}{spec.torch[1]}-{spec.arch}" if spec.arch else spec.key


def ensure_env(
    spec: EnvSpec, index: str | None = None, say: Callable[[str], None] = lambda s: None,
    progress: Callable[[str], None] | None = None,
) -> BuildEnv:
    """The managed environment for spec, created on first use (pip install of its torch).
    `say` hears once what the creation downloads and how big; `progress`, as pip goes,
    what it is downloading ("downloading torch-...whl: 1.2 of 3.0 GB").

    Any failure removes the half-made environment and raises EnvironmentCreateError naming
    the request and the log; Ctrl-C removes it too and stays a KeyboardInterrupt, so a
    matrix build stops instead of going on to the next variant.
    """
    root = envs_root()

    def waiting(holder: int | None) -> None:
        by = f" (pid {holder})" if holder else ""
        say(f"waiting for another kbuild{by} to finish creating build environment {spec.key}")

    with exclusive_lock(root / f"{_lock_key(spec)}.lock", on_wait=waiting):
        env = find_env(spec)
        if env is not None:
            return env
        return _create(spec, root / spec.key, index, say, progress)


def _create(
    spec: EnvSpec, path: Path, index: str | None, say: Callable[[str], None], progress: Callable[[str], None] | None,
) -> BuildEnv:
    if spec.arch:
        return cross_env.create(spec, path, pip_request(spec, index)[1], say, progress, remove=_remove)
    url = pip_request(spec, index)[1]
    requirement = narrowed_requirement(spec, index)
    source = mask_credentials(url) if url else "pip's configured index"
    log = path.with_name(f"{spec.key}.log")

    def fail(reason: str) -> EnvironmentCreateError:
        return EnvironmentCreateError(
            f"cannot create build environment {spec.key}: pip install {requirement} from {source}: {reason}; log: {log}"
        )

    _remove(path)  # what a killed or broken creation left behind
    cost = creation_cost(spec, index)
    size = "size unknown" if cost is None else cost.describe(["torch"])
    shown = ["--index-url", mask_credentials(url)] if url else []
    say(f"creating build environment {spec.key} (first time only): pip install {shlex.join([requirement, *shown])} "
        f"— {size}")
    python = _python(path)
    # No --isolated: the user's pip config (indexes, constraints, certificates) applies. The
    # index goes in pip's environment: its arguments are visible to every local user.
    install = [str(python), "-m", "pip", "install", requirement]
    tracker = pip_run.PipProgress(*((cost.sizes(), cost.total) if cost else ()))
    try:
        created = pip_run.run_logged([[base_python(), "-m", "venv", str(path)]], log)
        # The new venv's own pip says whether it prints raw progress (pip >= 24.1).
        if not created or not pip_run.run_logged([install[:5] + pip_run.progress_args(str(python)) + install[5:]],
                                                 log, progress, tracker, append=True,
                                                 environment=pip_run.pip_environment(url)):
            raise fail(pip_run.pip_reason(log.read_text(errors="replace")))
        try:
            env = probe_env(python, path / PROBE_FILE, import_torch=True)  # the new torch imports
        except EnvironmentProbeError as e:
            raise fail(e.message) from None
        if not spec.satisfied_by(env):
            got = f"torch {env.torch_version} ({describe_compute(compute_tag(env))})"
            _remember_unservable(spec, url, got)
            raise fail(
                f"it installed {got}, not {spec.describe()}; "
                f"pass --torch-index (or set KBUILD_TORCH_INDEX) to an index that serves {spec.compute} wheels"
            )
        _write_marker(path, spec, requirement, url, env)
    except OSError as e:  # no interpreter to run, disk full
        _remove(path)
        raise fail(str(e)) from None
    except BaseException:  # including Ctrl-C: never leave a half-made environment
        _remove(path)
        raise
    return env


# An index that installs the wrong flavour (CPU torch for a CUDA request) will do so again:
# planning skips such an environment for a while instead of a minute-long pip install that
# fails the job on every build. `kbuild env create KEY` (or another --torch-index) retries.
_UNSERVABLE_DAYS = 7


def _unservable_file(spec: EnvSpec) -> Path:
    return envs_root() / f"{spec.key}.unservable.json"


def _remember_unservable(spec: EnvSpec, url: str | None, got: str) -> None:
    record = {"index": mask_credentials(url), "installed": got,
              "when": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    _unservable_file(spec).write_text(json.dumps(record) + "\n")


def forget_unservable(spec: EnvSpec) -> None:
    _unservable_file(spec).unlink(missing_ok=True)


def unservable_reason(spec: EnvSpec, index: str | None = None) -> str | None:
    """Why creating spec's environment from this index is known to fail, or None. For a
    CUDA flavour asked of pip's own configured index, pip is asked first (a dry run of a
    few seconds): a local or mirrored index may serve another flavour than PyPI does."""
    url = pip_request(spec, index)[1]
    record = _unservable_record(spec, url)
    if record is None and url is None and spec.compute not in _ANY_FLAVOUR:
        offered = _offered_compute(spec)
        if offered is not None and offered != spec.compute:
            version = f"{spec.torch[0]}.{spec.torch[1]}"
            _remember_unservable(spec, url, f"torch {version} ({describe_compute(offered)})")
            record = _unservable_record(spec, url)
    if record is None:
        return None
    source = mask_credentials(url) if url else "pip's configured index"
    return (
        f"{source} serves no {spec.describe()} (on {record['when']:%Y-%m-%d} it offered {record.get('installed')}); "
        f"pass --torch-index, or `kbuild env create {spec.key}` to try again"
    )


def _unservable_record(spec: EnvSpec, url: str | None) -> dict | None:
    try:
        record = json.loads(_unservable_file(spec).read_text())
        record["when"] = datetime.fromisoformat(record["when"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if record.get("index") != mask_credentials(url):
        return None  # another index may serve it: try
    if datetime.now(timezone.utc) - record["when"] > timedelta(days=_UNSERVABLE_DAYS):
        return None
    return record


def _offered_compute(spec: EnvSpec) -> str | None:
    """The compute tag of the torch that pip's configured index would install for spec
    (the dry run that also sizes its creation), or None when pip cannot tell quickly."""
    torch = _offered_torch(narrowed_requirement(spec))
    return None if torch is None else _compute_of(torch, spec)


def _compute_of(torch: download_cost.Download, spec: EnvSpec) -> str | None:
    return wheel_compute({"version": torch.version, "requires_dist": list(torch.requires_dist)}, spec.torch)


def _offered_torch(requirement: str, cached_only: bool = False) -> download_cost.Download | None:
    downloads = _dry_run(requirement, None, cached_only)
    return next((d for d in downloads or () if d.name.lower() == "torch"), None)


def _dry_run(requirement: str, url: str | None, cached_only: bool = False) -> tuple[download_cost.Download, ...] | None:
    """What `pip install requirement` from `url` (None: pip's own indexes) would install:
    one resolve, cached, for both the flavour check and the size of the creation."""
    return download_cost.dry_run(base_python(), [requirement], cached_only=cached_only, index_url=url)


def creation_cost(spec: EnvSpec, index: str | None = None, cached_only: bool = False) -> download_cost.DownloadCost | None:
    """What creating spec's environment downloads, with sizes; None when pip cannot tell
    (or, with `cached_only`, has not been asked yet)."""
    if spec.arch:
        return cross_env.creation_cost(spec, pip_request(spec, index)[1], cached_only)
    downloads = _dry_run(narrowed_requirement(spec, index, cached_only), pip_request(spec, index)[1], cached_only)
    return None if downloads is None else download_cost.cost(downloads)


def base_python() -> str:
    """The interpreter new environments are made from (and pip is asked with)."""
    return getattr(sys, "_base_executable", None) or sys.executable  # not a venv nested in kbuild's own


def wheel_compute(metadata: dict, torch: tuple[int, int]) -> str | None:
    """The compute tag of a torch wheel from its metadata (as pip's --report gives it):
    the local version label (2.13.0+cpu, +cu130, +rocm7.1), else PyPI's own CUDA flavour
    for that release when it pulls nvidia-* wheels, else CPU."""
    local = metadata.get("version", "").partition("+")[2]
    if local:
        return local.replace(".", "")
    if any(r.startswith("nvidia-") for r in metadata.get("requires_dist") or ()):
        return pypi_flavour(torch)
    return "cpu"


def _write_marker(path: Path, spec: EnvSpec, requirement: str, url: str | None, env: BuildEnv) -> None:
    data = {
        "format": 1,
        "key": spec.key,
        "torch": f"{spec.torch[0]}.{spec.torch[1]}",
        "compute": spec.compute,
        "requirement": requirement,
        "index": mask_credentials(url),
        "torch_version": env.torch_version,
        "python": env.python,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    tmp = path / f"{MARKER}.tmp"
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path / MARKER)  # atomic: the env is complete exactly when the marker exists


# -- listing and pruning ------------------------------------------------------------------
@dataclass(frozen=True)
class ManagedEnv:
    key: str
    path: Path
    spec: EnvSpec | None  # None when the folder name is not a key
    torch_version: str | None  # from the marker; None while incomplete
    complete: bool
    size_bytes: int
    last_used: datetime | None
    created: datetime | None

    def to_json(self) -> dict:
        return {
            "key": self.key,
            "path": str(self.path),
            "torch": None if self.spec is None else "%d.%d" % self.spec.torch,
            "compute": None if self.spec is None else self.spec.compute,
            "torch_version": self.torch_version,
            "complete": self.complete,
            "size_bytes": self.size_bytes,
            "last_used": self.last_used.isoformat(timespec="seconds") if self.last_used else None,
            "created": self.created.isoformat(timespec="seconds") if self.created else None,
        }


def is_managed_env(env: BuildEnv) -> bool:
    """Whether kbuild made `env` (and may install into it), not a user's own --env."""
    return (Path(env.python).parent.parent / MARKER).is_file()


def _is_managed(path: Path) -> bool:
    # Only what kbuild made: KBUILD_ENVS_DIR may point at a folder holding other things,
    # and prune removes every incomplete entry it lists.
    if path.is_symlink() or not path.is_dir():
        return False
    return bool(_KEY_RE.match(path.name)) or (path / MARKER).is_file()


def _inspect(path: Path) -> ManagedEnv:
    try:
        marker = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        marker = None
    created = None
    if marker and marker.get("created"):
        created = datetime.fromisoformat(marker["created"])
    try:
        last_used = datetime.fromtimestamp((path / _LAST_USED).stat().st_mtime, timezone.utc)
    except OSError:
        last_used = created
    return ManagedEnv(
        key=path.name,
        path=path,
        spec=EnvSpec.from_key(path.name),
        torch_version=marker.get("torch_version") if marker else None,
        complete=marker is not None,
        size_bytes=disk_usage(path),
        last_used=last_used,
        created=created,
    )


def disk_usage(path: Path) -> int:
    """Bytes on disk, like du: what removing it frees."""
    total = 0
    for folder, dirs, files in os.walk(path):
        for name in files + dirs:
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            total += getattr(st, "st_blocks", 0) * 512 or st.st_size
    return total


def list_envs() -> list[ManagedEnv]:
    root = envs_root()
    return [_inspect(p) for p in sorted(root.iterdir()) if _is_managed(p)]


def prune(*, all: bool = False, older_than_days: float | None = None, keys: Sequence[str] = ()) -> list[ManagedEnv]:
    """Remove incomplete environments always, plus `keys`, those unused for longer than
    `older_than_days`, or with `all` every one. Returns what was removed. An environment
    that another kbuild is creating right now is left alone."""
    root = envs_root()
    envs = list_envs()
    known = sorted(e.key for e in envs)
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise KbuildError(
            f"no managed build environment {', '.join(unknown)} in {root}; known: {', '.join(known) or 'none'}"
        )
    cutoff = None if older_than_days is None else datetime.now(timezone.utc) - timedelta(days=older_than_days)

    def doomed(e: ManagedEnv) -> bool:
        if all or not e.complete or e.key in keys:
            return True
        used = e.last_used or e.created
        return cutoff is not None and used is not None and used < cutoff

    removed = []
    for e in filter(doomed, envs):
        with exclusive_lock(root / f"{e.key}.lock", blocking=False) as held:
            if not held:
                continue  # being created (or removed) by another kbuild
            _remove(e.path)
            if e.path.exists():
                raise KbuildError(f"could not remove {e.path} completely; remove it by hand")
            _remove_leftovers(root, e.key)
        removed.append(e)
    # Logs and locks of environments that no longer exist, e.g. of failed creations.
    for key in sorted({f.stem for f in [*root.glob("*.log"), *root.glob("*.lock")]}):
        if _KEY_RE.match(key) and not (root / key).exists():
            with exclusive_lock(root / f"{key}.lock", blocking=False) as held:
                if held:
                    _remove_leftovers(root, key)
    return removed


def _remove_leftovers(root: Path, key: str) -> None:
    # Called with the lock held: exclusive_lock notices the file went away and re-locks a new one.
    (root / f"{key}.log").unlink(missing_ok=True)
    (root / f"{key}.lock").unlink(missing_ok=True)


def _remove(path: Path) -> None:
    root = envs_root()
    if path.parent != root:  # never anything outside the store
        raise KbuildError(f"refusing to remove {path}: not in {root}")
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)
