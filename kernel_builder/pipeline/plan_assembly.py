"""The one assembly of a build's plan: a kernel's manifest, the selection options (--variant,
--matrix, --shard, --variant-names, --out) and the build environments -> what the plan is made
from (`PlanInputs`), and from that the plan itself (kernel_builder.pipeline.plan.plan_build).

`kbuild build` (its local runner plans from it), `kbuild plan`, `kbuild variants` and
`kbuild doctor KERNEL_DIR` all start here, so the variants one lists are the ones the other
builds.

Example:
    >>> inputs = assemble_plan(load_manifest(Path("relu")), BuildOptions(matrix="backend=cpu"))
    >>> [row["variant"] for row in inputs.rows()]
    ['torch213-cxx11-cpu-x86_64-linux', ...]
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from kernel_builder.environments.choice import EnvChooser
from kernel_builder.errors import UsageError
from kernel_builder.kernel.manifest import Manifest, load_manifest
from kernel_builder.pipeline.host import judge
from kernel_builder.pipeline.input_ids import INPUT_ID, input_ids
from kernel_builder.pipeline.options import BuildOptions
from kernel_builder.pipeline.plan import Plan, naming_style, plan_build
from kernel_builder.pipeline.selection import resolve
from kernel_builder.pipeline.hub_variants import is_on_branch, parse_branch_ref, variants_on_branch
from kernel_builder.variants import BACKENDS, Style, Variant, default_matrix


@dataclass(frozen=True)
class PlanInputs:
    """Everything a plan for one kernel is made from, resolved once."""

    manifest: Manifest
    chooser: EnvChooser
    out: Path
    # Exactly these variants (--variant, or a --matrix selection named in `style`); () is
    # this machine's choice per backend.
    requested: tuple[str | Variant, ...]
    style: Style
    # A requested variant this machine cannot build is a skip with its reason (a selection),
    # not an error (--variant).
    skip_unbuildable: bool
    cuda_arch: tuple[str, ...] = ()
    ops_id: str | None = None

    def plan(self) -> Plan:
        return plan_build(
            self.manifest, self.chooser, self.out, self.requested, skip_unbuildable=self.skip_unbuildable,
            style=self.style, cuda_arch=self.cuda_arch, ops_id=self.ops_id,
        )

    def rows(self) -> list[dict]:
        """The plan as `kbuild plan` lists it (kernel_builder.pipeline.plan.Plan.rows)."""
        return self.plan().rows(self.chooser)

    def selecting(self, variants: Sequence[Variant]) -> PlanInputs:
        """The same plan for a selection of `variants` (as --matrix makes one)."""
        return replace(self, requested=tuple(v.with_style(self.style) for v in variants), skip_unbuildable=True)


def assemble_plan(
    manifest: Manifest, options: BuildOptions | None = None, chooser: EnvChooser | None = None, ops_id: str | None = None,
) -> PlanInputs:
    """What a build of `manifest` with `options` plans from (default: BuildOptions(), this
    machine's variants into KERNEL_DIR/build). `chooser` gives the build environments
    (default: the options'); `ops_id` fixes the op namespace (kbuild dev: plan_build)."""
    options = options or BuildOptions()
    selected = resolve(manifest, options.matrix, options.shard)
    out = Path(options.out) if options.out else manifest.root / "build"
    style = naming_style(options.variant_names, options.variants)
    requested = options.variants if selected is None else tuple(v.with_style(style) for v in selected)
    return PlanInputs(
        manifest, chooser or options.env_chooser(), out, requested, style, skip_unbuildable=selected is not None,
        cuda_arch=options.cuda_arch, ops_id=ops_id,
    )


@dataclass(frozen=True)
class VariantTable:
    """What `kbuild plan` and `kbuild variants` print: a row per variant (built here, or why
    not: kernel_builder.pipeline.host.variant_row), judged with `environments`."""

    kernel: str | None  # the kernel's name, None for the default matrix alone
    environments: str  # the build environments judged with, described
    rows: list[dict]


def _environments(chooser: EnvChooser) -> str:
    return chooser.primary.describe() if chooser.primary else "no torch in the running interpreter"


def plan_table(kernel_dir: Path, options: BuildOptions, missing_from: str | None = None,
               with_input_ids: bool = False) -> VariantTable:
    """`kbuild plan`: the jobs `kbuild build` would run with `options`, and its skips. With
    `missing_from` (ORG/NAME@vN), only the variants that branch of the Hub does not have yet
    (in either naming style): what `kbuild publish --add-variants` would add once built.
    `with_input_ids`: each row gets its job's input id (kernel_builder.pipeline.input_ids;
    None for a skip), its build environment created where missing."""
    manifest = load_manifest(kernel_dir)
    ref = parse_branch_ref(missing_from) if missing_from is not None else None
    if ref is not None and ref.major != manifest.general.version:
        raise UsageError(f"--missing-from {missing_from}: {manifest.name}'s build.toml has version = "
                         f"{manifest.general.version}, so its builds go to branch v{manifest.general.version}")
    inputs = assemble_plan(manifest, options)
    plan = inputs.plan()
    rows = plan.rows(inputs.chooser)
    if ref is not None:
        present = variants_on_branch(ref)
        # A row without a variant is a whole backend that builds nothing here: nothing to add.
        rows = [row for row in rows if row["variant"] is not None and not is_on_branch(row["variant"], present)]
    if with_input_ids:
        listed = {row["variant"] for row in rows}
        ids = input_ids((job for job in plan.jobs if job.variant.name in listed), inputs.chooser)
        rows = [row | {INPUT_ID: ids.get(row["variant"])} for row in rows]
    return VariantTable(inputs.manifest.name, _environments(inputs.chooser), rows)


def matrix_table(kernel_dir: Path | None, env: Path | None) -> VariantTable:
    """`kbuild variants`: the default matrix (of the kernel's backends, with a kernel), each
    variant marked buildable here with `env` (default: the running interpreter) or why not."""
    manifest = load_manifest(kernel_dir) if kernel_dir is not None else None
    backends = manifest.general.backends if manifest else BACKENDS
    chooser = EnvChooser.from_options(env)
    rows = [judge(manifest, v, chooser) for v in default_matrix().variants if v.backend in backends]
    return VariantTable(manifest.name if manifest else None, _environments(chooser), rows)
