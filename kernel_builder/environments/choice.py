"""Which build environment builds which variant.

The primary environment is `--env PATH` or else the interpreter running kbuild. It
builds every variant its torch matches. Any other variant gets kbuild's managed
environment for its torch version and compute (kernel_builder.environments.store), created on
first use unless creation is turned off. A stable-ABI variant builds in any environment
whose torch is at least its ABI version: the primary, else the newest managed one. An
environment named with `--env` is never silently replaced: a variant it cannot build is
an error that says what it has."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kernel_builder.environments.probe import BuildEnv, current_env, probe_env
from kernel_builder.errors import EnvironmentProbeError, VariantError
from kernel_builder.environments.store import (
    EnvSpec,
    describe_compute,
    ensure_env,
    find_env,
    managed_specs,
    unservable_reason,
)
from kernel_builder.variants import Kind, Variant, default_matrix


@dataclass
class EnvChooser:
    primary: BuildEnv | None  # None: the running interpreter has no torch
    explicit: bool = False  # primary came from --env
    create: bool = True  # create missing managed environments
    index: str | None = None  # pip index for torch when creating one
    say: Callable[[str], None] = field(default=lambda message: None)

    @classmethod
    def from_options(cls, env_path: Path | None = None, **options) -> "EnvChooser":
        """`--env PATH` (a virtual environment folder or its python), else the running
        interpreter, which may lack torch: then every variant uses a managed environment."""
        if env_path is not None:
            return cls(probe_env(_interpreter(Path(env_path))), explicit=True, **options)
        try:
            primary = current_env()
        except EnvironmentProbeError:
            primary = None
        return cls(primary, **options)

    def primary_builds(self, variant: Variant) -> bool:
        env = self.primary
        if env is None or variant.kind is Kind.NOARCH:
            return env is not None
        spec = EnvSpec.for_variant(variant)
        if variant.kind is Kind.STABLE_ABI:
            # Stable-ABI code compiles against any torch at least as new as the ABI version.
            return env.torch >= variant.torch and EnvSpec(env.torch, spec.compute).satisfied_by(env)
        return spec.satisfied_by(env)

    def spec_for(self, variant: Variant) -> EnvSpec:
        """The managed environment that builds `variant`. For a stable-ABI variant: the
        newest one already made whose torch is at least the ABI version, else the newest
        such torch of the default matrix for its compute (created on first use)."""
        if variant.kind is not Kind.STABLE_ABI:
            return EnvSpec.for_variant(variant)
        compute = variant.compute
        made = sorted({s.torch for s in managed_specs() if s.torch >= variant.torch}, reverse=True)
        for torch in made:
            if find_env(EnvSpec(torch, compute)) is not None:
                return EnvSpec(torch, compute)
        shipped = [
            v.torch for v in default_matrix().variants
            if v.compute == compute and v.platform == variant.platform and v.torch >= variant.torch
        ]
        return EnvSpec(max(shipped, default=variant.torch), compute)

    def available(self, variant: Variant) -> bool:
        """Whether `env_for` can answer without creating anything."""
        return self.primary_builds(variant) or (not self.explicit and find_env(self.spec_for(variant)) is not None)

    def unavailable_reason(self, variant: Variant) -> str | None:
        """Why `env_for(variant)` would fail without trying to create anything, or None."""
        if self.available(variant):
            return None
        spec = self.spec_for(variant)
        if self.explicit:
            needs = spec.describe()
            if variant.kind is Kind.STABLE_ABI:
                needs = f"torch {variant.torch_version} or newer ({describe_compute(spec.compute)})"
            return f"--env {self.primary.python} has {self.primary.describe()}; {variant.name} needs {needs}"
        if not self.create:
            return (
                f"no build environment with {spec.describe()} yet "
                f"(`kbuild env create {spec.key}` makes one, or build without --no-create-env)"
            )
        return unservable_reason(spec, self.index)

    def describe_for(self, variant: Variant) -> str:
        """Which environment would build `variant`, for listings."""
        if self.primary_builds(variant):
            return f"{'--env' if self.explicit else 'this interpreter'}: {self.primary.describe()}"
        spec = self.spec_for(variant)
        found = find_env(spec)
        if found is not None:
            return f"managed {spec.key}: {found.describe()}"
        return f"managed {spec.key}: created on first build ({spec.describe()})"

    def env_for(self, variant: Variant, progress: Callable[[str], None] | None = None) -> BuildEnv:
        """The environment that builds `variant`, created now if need be (`progress` hears
        what pip is downloading)."""
        if self.primary_builds(variant):
            return self.primary
        reason = self.unavailable_reason(variant)
        if reason:
            raise VariantError(f"cannot build {variant.name}: {reason}")
        spec = self.spec_for(variant)
        return find_env(spec) or ensure_env(spec, self.index, self.say, progress)


def _interpreter(path: Path) -> Path:
    """A virtual environment folder names its bin/python; a file is the interpreter."""
    if path.is_dir():
        for candidate in (path / "bin" / "python", path / "bin" / "python3", path / "Scripts" / "python.exe"):
            if candidate.exists():
                return candidate
        raise EnvironmentProbeError(f"--env {path}: no bin/python in this folder; name a virtual environment or its interpreter")
    return path
