"""`kbuild env`'s work on kbuild's managed environments as a whole: the build environments
(kernel_builder.environments.store) and the runtime overlays made on top of them
(kernel_builder.environments.runtime_overlay), listed, created and pruned together."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from kernel_builder.environments.probe import BuildEnv
from kernel_builder.environments.runtime_overlay import Overlay, list_overlays, prune_overlays
from kernel_builder.environments.store import EnvSpec, ManagedEnv, ensure_env, envs_root, forget_unservable, list_envs
from kernel_builder.environments.store import prune as prune_envs


@dataclass(frozen=True)
class Inventory:
    envs: list[ManagedEnv]
    overlays: list[Overlay]

    @staticmethod
    def root() -> Path:
        """Where the build environments live."""
        return envs_root()

    def to_json(self) -> list[dict]:
        return [*(e.to_json() for e in self.envs), *(o.to_json() for o in self.overlays)]


def inventory() -> Inventory:
    """`kbuild env list`: every managed build environment and runtime overlay."""
    return Inventory(list_envs(), list_overlays())


def create(name: str, torch_index: str | None = None, say: Callable[[str], None] = lambda line: None) -> tuple[EnvSpec, BuildEnv]:
    """`kbuild env create NAME` (a variant or an environment key): the build environment,
    created unless it exists; one pip could not serve before is tried again (asked for by name)."""
    spec = EnvSpec.parse(name)
    forget_unservable(spec)
    return spec, ensure_env(spec, torch_index, say=say)


def prune(
    keys: Sequence[str] = (), *, all: bool = False, older_than_days: float | None = None,  # noqa: A002 - the flag's name
) -> list[ManagedEnv | Overlay]:
    """`kbuild env prune`: remove the build environments and runtime overlays named by `keys`
    (either kind), or all, or those unused for `older_than_days`; incomplete ones always go."""
    overlay_keys = {o.key for o in list_overlays()}
    removed: list[ManagedEnv | Overlay] = list(
        prune_envs(all=all, older_than_days=older_than_days, keys=tuple(k for k in keys if k not in overlay_keys))
    )
    # After the environments: an overlay on a removed environment is an orphan and goes too.
    removed += prune_overlays(all=all, older_than_days=older_than_days, keys=tuple(k for k in keys if k in overlay_keys))
    return removed
