"""Manifest x build environment -> one BuildJob per variant, plus the skips and their reasons."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernel_builder.compile.backends import Unavailable, get_backend
from kernel_builder.paths import cache_dir, short_key
from kernel_builder.environments.choice import EnvChooser
from kernel_builder.compile.job import BuildJob
from kernel_builder.errors import VariantError
from kernel_builder.pipeline.host import describe_environment, torch_bounds_reason, variant_row, why_not
from kernel_builder.kernel.manifest import Manifest
from kernel_builder.kernel.identity import kernel_identity
from kernel_builder.variants import LEGACY_PYTHON, Kind, Style, Variant, noarch_variant


@dataclass(frozen=True)
class Skip:
    backend: str
    reason: str
    variant: str | None = None  # None: the whole backend (no variant chosen for it)


@dataclass(frozen=True)
class Plan:
    jobs: tuple[BuildJob, ...]
    skips: tuple[Skip, ...]
    # Backends that cannot build a variant here but can compile-check their device code
    # (ROCm without a ROCm torch), with the folder to do it in.
    device_checks: tuple[tuple[str, Path], ...] = ()

    def rows(self, chooser: EnvChooser) -> list[dict]:
        """What `kbuild plan` prints: each job with its environment, each skip with its reason."""
        rows = [variant_row(j.variant.name, j.backend, environment=describe_environment(j.variant, chooser)) for j in self.jobs]
        rows += [variant_row(s.variant, s.backend, s.reason) for s in self.skips]
        rows += [variant_row(None, b, "no variant can be built here; its device code is compiled as a check")
                 for b, _ in self.device_checks]
        return rows


def default_target(manifest: Manifest, backend_name: str, chooser: EnvChooser) -> Variant | Unavailable:
    """The variant `kbuild build` makes for a backend: the primary environment's, else the
    backend's own choice for this machine (built in a managed environment)."""
    if manifest.noarch is not None:  # before the registry: TPU, Neuron and CANN are noarch-only
        return noarch_variant(backend_name)
    backend = get_backend(backend_name)
    target: Variant | Unavailable = Unavailable(backend_name, "the running interpreter has no torch")
    if chooser.primary is not None:
        target = backend.target(manifest, chooser.primary)
        if isinstance(target, Variant):
            reason = torch_bounds_reason(manifest, target.torch)
            if reason is None:
                return target
            target = Unavailable(backend_name, f"{reason} (the build environment's)")
    fallback = None if chooser.explicit else backend.default_variant(manifest)
    return target if fallback is None else fallback


def naming_style(option: str | None, requested: tuple[str | Variant, ...] = ()) -> Style:
    """The style of the variant names kbuild picks (`--variant-names`, default legacy: every
    kernels release reads legacy names, while transformers <= 5.24 pins kernels < 0.19, which
    cannot read new ones). A `--variant` is built as spelled; one spelled in the other style
    than an explicit `--variant-names` is an error rather than a silent rename."""
    if option is None:
        return Style.LEGACY
    style = Style.parse(option)
    for item in requested:
        variant = item if isinstance(item, Variant) else Variant.parse(item)
        if variant.kind is not Kind.NOARCH and variant.style is not style:
            twin = variant.other_style()
            instead = f"; ask for {twin.name} instead" if twin is not None else ""
            raise VariantError(
                f"--variant {variant.name} is a {variant.style.value}-style name, but --variant-names is {style.value}{instead}"
            )
    return style


def python_tag_reason(variant: Variant) -> str | None:
    """Why kbuild cannot build a variant named for another Python than its libraries need:
    every backend compiles against the limited API of Python 3.9 (Py_LIMITED_API, abi3)."""
    if variant.python_is_legacy:
        return None
    return (
        f"kbuild compiles against the limited API of Python {LEGACY_PYTHON[0]}.{LEGACY_PYTHON[1]} (abi3), "
        f"so its builds are cpython-{LEGACY_PYTHON[0]}.{LEGACY_PYTHON[1]}-abi3, not {variant.python_tag}"
    )


def kernel_work_root(manifest: Manifest) -> Path:
    """The kernel's CMake work trees, one per variant, shared by every --out."""
    return cache_dir("work", short_key(str(manifest.root.resolve())))


def work_tree(work_root: Path, variant: Variant, cuda_arch: tuple[str, ...] = (), ops_id: str | None = None) -> Path:
    """One work tree per kind of compile: the same for both styles of a name (renaming
    recompiles nothing), its own for a fixed op namespace or a --cuda-arch build, so switching
    between a development build and the release build recompiles neither."""
    name = variant.with_style(Style.LEGACY).name
    if ops_id:
        name += f"-{ops_id}"
    return work_root / (f"{name}-sm{'-'.join(a.replace('.', '') for a in cuda_arch)}" if cuda_arch else name)


def plan_build(
    manifest: Manifest,
    chooser: EnvChooser,
    out_dir: Path,
    requested: tuple[str | Variant, ...] = (),
    skip_unbuildable: bool = False,
    style: Style = Style.LEGACY,
    cuda_arch: tuple[str, ...] = (),
    ops_id: str | None = None,
) -> Plan:
    """The jobs for `manifest` on this machine; with `requested`, exactly those variants
    (names of either style), else this machine's, named in `style`.
    A requested variant this machine cannot build is an error (`--variant`), or with
    `skip_unbuildable` a skip that says why (`--matrix`).

    A job whose variant needs a managed environment carries env=None; the build creates
    or finds that environment when the job runs (kbuild.build), not while planning.
    `cuda_arch` restricts the CUDA jobs to those architectures (work_tree). `ops_id` replaces
    the source hash in the op namespace (kbuild dev's `dev`: an edit then changes no compile
    flag, so Ninja recompiles only the files it touches), in work trees of its own."""
    manifest.require_buildable()
    kernel_id, source = kernel_identity(manifest)
    kernel_id = ops_id or kernel_id
    work_root = kernel_work_root(manifest)

    def job(variant: Variant) -> BuildJob:
        env = chooser.primary if variant.kind is Kind.NOARCH or chooser.primary_builds(variant) else None
        archs = cuda_arch if variant.backend == "cuda" and variant.kind is not Kind.NOARCH else ()
        work_dir = work_tree(work_root, variant, archs, ops_id)
        return BuildJob(manifest, env, variant, variant.backend, kernel_id, source, out_dir, work_dir, archs)

    if requested:
        variants, skipped = {}, []
        for item in requested:
            variant = item if isinstance(item, Variant) else Variant.parse(item)
            # What can be built does not depend on the name's style.
            reason = python_tag_reason(variant) or why_not(manifest, variant.with_style(Style.LEGACY), chooser)
            if reason and not skip_unbuildable:
                raise VariantError(f"cannot build {variant.name} here: {reason}")
            if reason:
                skipped.append(Skip(variant.backend, reason, variant.name))
            else:
                variants[variant.name] = variant
        for variant in variants.values():
            twin = variant.other_style()
            if twin is not None and twin.name in variants:
                raise VariantError(f"{variant.name} and {twin.name} are one build under two names; ask for one of them")
        return Plan(tuple(job(v) for v in variants.values()), tuple(skipped))

    jobs, skips, checks = [], [], []
    for backend in manifest.general.backends:
        target = default_target(manifest, backend, chooser)
        reason = target.reason if isinstance(target, Unavailable) else chooser.unavailable_reason(target)
        if not reason:
            jobs.append(job(target.with_style(style)))
        elif get_backend(backend).device_check_possible():
            checks.append((backend, work_root / f"{backend}-device-check"))
        else:
            skips.append(Skip(backend, reason))
    return Plan(tuple(jobs), tuple(skips), tuple(checks))
