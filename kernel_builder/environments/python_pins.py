"""The pip requirement of each python-depends entry: its package as the kernels runtime names it,
at the release kernel-builder's Nix would give the kernel (kernel_builder/data/python_depends.toml).

kernel-builder pins some of them itself (nvidia-cutlass-dsl, apache-tvm-ffi), and which release
depends on the kernel-builder revision a kernel's flake.lock locks: kernels-community's msa locks
one whose nvidia-cutlass-dsl is 4.5.0, and its code uses `cute.core.ThrMma`, which 4.6 removed.
So the pin follows the kernel's flake.lock (`locked.lastModified` of its kernel-builder input);
a kernel without one gets kernel-builder's newest pin. A build records the pins it chose in
metadata.json's `kbuild` stamp, so a built variant's import check installs the same."""

from __future__ import annotations

import functools
import json
import tomllib
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path

FLAKE_INPUT = "kernel-builder"  # the flake input name kernel repos give kernel-builder
STAMP_KEY = "python-pins"  # in metadata.json's `kbuild` stamp: {python-depends name: version}


@dataclass(frozen=True)
class PythonDepend:
    name: str  # as build.toml writes it: tvm-ffi
    pip: str  # the package: apache-tvm-ffi
    module: str  # what it makes importable: tvm_ffi
    pins: tuple[tuple[datetime, str], ...] = ()  # (since, version), oldest first

    def version_at(self, when: datetime | None) -> str | None:
        """The pinned release at kernel-builder time `when` (None: the newest)."""
        if not self.pins:
            return None
        if when is None:
            return self.pins[-1][1]
        in_force = [version for since, version in self.pins if since <= when]
        return in_force[-1] if in_force else self.pins[0][1]


@functools.cache
def known() -> dict[str, PythonDepend]:
    text = resources.files("kernel_builder").joinpath("data/python_depends.toml").read_text()
    return {
        name: PythonDepend(name, entry["pip"], entry.get("module", name.replace("-", "_")),
                           tuple((pin["since"], pin["version"]) for pin in entry.get("pins", ())))
        for name, entry in tomllib.loads(text).items()
    }


def locked_kernel_builder(root: Path) -> datetime | None:
    """When the kernel-builder revision the kernel's flake.lock locks was committed, or None
    (no flake.lock, no kernel-builder input, or a lock file that does not say)."""
    try:
        nodes = json.loads((Path(root) / "flake.lock").read_text()).get("nodes", {})
        stamp = nodes[FLAKE_INPUT]["locked"]["lastModified"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return datetime.fromtimestamp(stamp, timezone.utc) if isinstance(stamp, int) else None


def kernel_pins(root: Path) -> dict[str, str]:
    """{python-depends name: version} of every pinned entry, for the kernel repo at `root`."""
    when = locked_kernel_builder(root)
    return {name: depend.version_at(when) for name, depend in known().items() if depend.pins}


def variant_pins(metadata: dict) -> dict[str, str]:
    """The pins a built variant's stamp records; kernel-builder's newest where it records none."""
    stamp = metadata.get("kbuild") if isinstance(metadata, dict) else None
    recorded = stamp.get(STAMP_KEY) if isinstance(stamp, dict) else None
    newest = {name: depend.version_at(None) for name, depend in known().items() if depend.pins}
    if isinstance(recorded, dict):
        newest.update({k: v for k, v in recorded.items() if isinstance(k, str) and isinstance(v, str)})
    return newest


def requirement(name: str, pins: dict[str, str]) -> str:
    """The pip requirement of python-depends `name`: apache-tvm-ffi==0.1.9, einops."""
    depend = known().get(name)
    pip = depend.pip if depend else name
    return f"{pip}=={pins[name]}" if name in pins else pip


def module(name: str) -> str:
    """The module python-depends `name` provides (a scanned import of it is no second need)."""
    depend = known().get(name)
    return depend.module if depend else name.replace("-", "_")
