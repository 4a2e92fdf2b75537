"""`kbuild env`'s work on kbuild's managed environments as a whole: the build environments
(kernel_builder.environments.store), the runtime overlays made on top of them
(kernel_builder.environments.runtime_overlay) and the CUTLASS header folders
(kernel_builder.environments.cutlass_folders), listed, created and pruned together."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from kernel_builder.environments.cutlass_folders import KEY_PREFIX, HeaderFolder, list_header_folders, prune_header_folders
from kernel_builder.environments.probe import BuildEnv
from kernel_builder.environments.runtime_overlay import Overlay, list_overlays, prune_overlays
from kernel_builder.environments.store import EnvSpec, ManagedEnv, ensure_env, envs_root, forget_unservable, list_envs
from kernel_builder.environments.store import prune as prune_envs


@dataclass(frozen=True)
class Inventory:
    envs: list[ManagedEnv]
    overlays: list[Overlay]
    headers: list[HeaderFolder]

    @staticmethod
    def root() -> Path:
        """Where the build environments live."""
        return envs_root()

    def to_json(self) -> list[dict]:
        return [*(e.to_json() for e in self.envs), *(o.to_json() for o in self.overlays), *(h.to_json() for h in self.headers)]


def inventory() -> Inventory:
    """`kbuild env list`: every managed build environment, runtime overlay and CUTLASS folder."""
    return Inventory(list_envs(), list_overlays(), list_header_folders())


def create(name: str, torch_index: str | None = None, say: Callable[[str], None] = lambda line: None) -> tuple[EnvSpec, BuildEnv]:
    """`kbuild env create NAME` (a variant or an environment key): the build environment,
    created unless it exists; one pip could not serve before is tried again (asked for by name)."""
    spec = EnvSpec.parse(name)
    forget_unservable(spec)
    return spec, ensure_env(spec, torch_index, say=say)


def prune(
    keys: Sequence[str] = (), *, all: bool = False, older_than_days: float | None = None,  # noqa: A002 - the flag's name
) -> list[ManagedEnv | Overlay | HeaderFolder]:
    """`kbuild env prune`: remove the build environments, runtime overlays and CUTLASS folders
    named by `keys` (any kind), or all, or those unused for `older_than_days`; incomplete ones always go."""
    overlay_keys = {o.key for o in list_overlays()}
    header_keys = {k for k in keys if k.startswith(KEY_PREFIX)}
    env_keys = tuple(k for k in keys if k not in overlay_keys and k not in header_keys)
    # The CUTLASS folders first: an unknown key of theirs is refused before anything goes.
    removed: list[ManagedEnv | Overlay | HeaderFolder] = list(
        prune_header_folders(all=all, older_than_days=older_than_days, keys=tuple(header_keys))
    )
    removed += prune_envs(all=all, older_than_days=older_than_days, keys=env_keys)
    # After the environments: an overlay on a removed environment is an orphan and goes too.
    removed += prune_overlays(all=all, older_than_days=older_than_days, keys=tuple(k for k in keys if k in overlay_keys))
    return removed
