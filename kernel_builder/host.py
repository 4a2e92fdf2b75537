"""What this machine can build: per backend, the variant its build environment yields or
the reason it yields none; and, for any variant of the matrix, why it is out of reach."""

from __future__ import annotations

from kernel_builder.backends import Unavailable, get_backend
from kernel_builder.backends.common import host_platform
from kernel_builder.envs import BuildEnv
from kernel_builder.manifest import Manifest
from kernel_builder.variants import BACKENDS, Variant


def backend_targets(
    env: BuildEnv, manifest: Manifest | None = None, backends: tuple[str, ...] = BACKENDS
) -> dict[str, Variant | Unavailable]:
    return {b: get_backend(b).target(manifest, env) for b in backends}


def why_not(variant: Variant, targets: dict[str, Variant | Unavailable], env: BuildEnv) -> str | None:
    """None if this machine builds `variant`, else the reason in one phrase."""
    target = targets.get(variant.backend)
    if target is None:
        return f"backend {variant.backend} is not selected"
    here = "-".join(host_platform())
    if variant.platform is not None and variant.platform != here:
        return f"needs platform {variant.platform} (this machine is {here})"
    if isinstance(target, Unavailable):
        return target.reason
    if target == variant:
        return None
    if variant.torch != target.torch:
        return f"needs torch {variant.torch_version}; the build environment has torch {env.torch_version}"
    if variant.backend_version != target.backend_version:
        return (
            f"needs {variant.backend} {variant.backend_version_str}; the build environment's torch "
            f"is built for {target.backend_version_str}"
        )
    return f"the build environment builds {target.name}"
