"""What this machine can build: for any variant, whether a toolchain and a build
environment for it exist here (or can be created), and if not, why not in one phrase."""

from __future__ import annotations

from kernel_builder.compile.backends import Unavailable, get_backend
from kernel_builder.environments.choice import EnvChooser
from kernel_builder.kernel.manifest import Manifest
from kernel_builder.environments.cross_target import Route, route
from kernel_builder.runtime.system import host_platform
from kernel_builder.variants import Kind, Variant


def torch_bounds_reason(manifest: Manifest | None, torch: tuple[int, int] | None) -> str | None:
    """Why `[torch] minver/maxver` excludes this torch version, or None (no manifest: nothing)."""
    return manifest.torch_reason(torch) if manifest else None


def why_not(manifest: Manifest | None, variant: Variant, chooser: EnvChooser) -> str | None:
    """None if this machine builds `variant` (of `manifest`, if given), else the reason."""
    if manifest is not None:
        reason = manifest.admits(variant)
        if reason:
            return reason
    here = "-".join(host_platform())
    found = route(variant.platform)
    if found is None:
        return f"needs platform {variant.platform} (this machine is {here})"
    reason = torch_bounds_reason(manifest, variant.torch)
    if reason:
        return reason
    if variant.kind is Kind.NOARCH:
        return None  # pure Python: nothing to compile
    backend = get_backend(variant.backend)
    if found is Route.CROSS and not backend.cross_compiles:
        return f"needs platform {variant.platform} (this machine is {here}; kbuild cross-compiles only CPU and CUDA variants for it)"
    if chooser.primary_builds(variant):
        target = backend.target(manifest, chooser.primary)
        if isinstance(target, Unavailable):
            return target.reason
        if target != variant:
            return f"the build environment ({chooser.primary.describe()}) builds {target.name}"
        return None
    return backend.variant_reason(manifest, variant, chooser.primary) or chooser.unavailable_reason(variant)


def variant_row(variant: str | None, backend: str, reason: str | None = None, environment: str | None = None) -> dict:
    """One row of `kbuild variants` and `kbuild plan`: buildable here and in which
    environment, or why not (variant None: a whole backend)."""
    return {"variant": variant, "backend": backend, "buildable": reason is None, "environment": environment, "reason": reason}


def judge(manifest: Manifest | None, variant: Variant, chooser: EnvChooser) -> dict:
    """`variant_row` for one variant of the matrix."""
    reason = why_not(manifest, variant, chooser)
    return variant_row(variant.name, variant.backend, reason, None if reason else describe_environment(variant, chooser))


def describe_environment(variant: Variant, chooser: EnvChooser) -> str:
    """Where `variant` builds: its environment, and which toolkit where that can differ (CUDA's nvcc)."""
    environment = chooser.describe_for(variant)
    note = get_backend(variant.backend).toolkit_note(variant) if variant.kind is not Kind.NOARCH else None
    return f"{environment}; {note}" if note else environment
