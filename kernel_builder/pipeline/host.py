"""What this machine can build: for any variant, whether a toolchain and a build
environment for it exist here (or can be created), and if not, why not in one phrase."""

from __future__ import annotations

from kernel_builder.compile.backends import Unavailable, get_backend
from kernel_builder.compile.backends.common import host_platform, stable_abi, torch_admits
from kernel_builder.environments.choice import EnvChooser
from kernel_builder.kernel.manifest import Manifest
from kernel_builder.variants import Kind, Variant, parse_version


def torch_bounds_reason(manifest: Manifest | None, torch: tuple[int, int] | None) -> str | None:
    """Why `[torch] minver/maxver` excludes this torch version, or None."""
    if torch_admits(manifest, torch):
        return None
    bounds = manifest.torch
    text = f"{torch[0]}.{torch[1]}"
    if bounds.minver and torch < parse_version(bounds.minver):
        return f"[torch] minver {bounds.minver} excludes torch {text}"
    return f"[torch] maxver {bounds.maxver} excludes torch {text}"


def _stable_abi_reason(manifest: Manifest, variant: Variant) -> str | None:
    """Why `[torch] stable-abi` rules out this kind of variant for its backend, or None."""
    if manifest.torch is None or variant.kind is Kind.NOARCH:
        return None
    abi = stable_abi(manifest, variant.backend)
    if abi is None:
        if variant.kind is Kind.STABLE_ABI:
            return f"[torch] stable-abi does not name {variant.backend}, so it builds one variant per torch release"
        return None
    tag = f"torch-stable-abi{abi[0]}{abi[1]}"
    if variant.kind is not Kind.STABLE_ABI or variant.torch != abi:
        return f"[torch] stable-abi builds {variant.backend} once, as {tag}-{variant.compute}-{variant.platform}"
    return None


def why_not(manifest: Manifest | None, variant: Variant, chooser: EnvChooser) -> str | None:
    """None if this machine builds `variant` (of `manifest`, if given), else the reason."""
    if manifest is not None:
        if variant.backend not in manifest.general.backends:
            return f"kernel '{manifest.name}' does not list backend '{variant.backend}' in [general] backends"
        if (variant.kind is Kind.NOARCH) != (manifest.noarch is not None):
            if manifest.noarch is not None:
                return "[torch-noarch] kernels build torch-<backend> variants"
            return "[torch] kernels build per-torch variants"
        reason = _stable_abi_reason(manifest, variant)
        if reason:
            return reason
    here = "-".join(host_platform())
    if variant.platform is not None and variant.platform != here:
        return f"needs platform {variant.platform} (this machine is {here})"
    reason = torch_bounds_reason(manifest, variant.torch)
    if reason:
        return reason
    if variant.kind is Kind.NOARCH:
        return None  # pure Python: nothing to compile
    backend = get_backend(variant.backend)
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
    """Where `variant` builds: its environment, and for CUDA which nvcc."""
    environment = chooser.describe_for(variant)
    if variant.backend == "cuda" and variant.backend_version is not None:
        from kernel_builder.compile.backends.cuda import describe_toolkit

        environment += f"; {describe_toolkit(variant.backend_version)}"
    return environment
