"""`kbuild docker ...`: the build images of the docker runner (docker_images.py)."""

from __future__ import annotations

from pathlib import Path

import typer

from kernel_builder.cli.output import console as _console
from kernel_builder.cli.output import print_json, new_app

docker_app = new_app("Build images for `kbuild build --runner docker`: one per backend family, torch and toolkit version.")


def default_selector() -> str:
    """What build-images builds without a selector: this machine's platform only (others
    would need emulation); 'all' asks for every Linux platform of the matrix."""
    from kernel_builder.runtime.system import host_platform

    return f"os=linux arch={host_platform()[0]}"


def selected_variants(selector: str, kernel: Path | None):
    """The variants of the default matrix that `selector` keeps (the `--matrix` syntax),
    among those `kernel` admits when given."""
    from kernel_builder.errors import VariantError
    from kernel_builder.pipeline.selection import Admitted, parse_selector, select
    from kernel_builder.variants import default_matrix

    if kernel is not None:
        from kernel_builder.kernel.manifest import load_manifest

        return select(load_manifest(kernel), selector)
    matrix = default_matrix()
    every = Admitted(matrix.variants, tuple(sorted({v.torch for v in matrix.variants})))
    variants = list(matrix.variants)
    for step in parse_selector(selector, every, matrix):
        kept = step.apply(variants)
        if not kept:
            raise VariantError(f"build-images '{selector}': {step.label} left none of the {len(variants)} variants before it")
        variants = kept
    return variants


KERNEL_OPTION = typer.Option(
    None, "--kernel", help="Only the images for variants this kernel (a folder holding build.toml) admits."
)


@docker_app.command("build-images")
def build_images_command(
    selector: str | None = typer.Argument(
        None, metavar="[SEL]",
        help="Which variants' images, as for `kbuild build --matrix` (e.g. 'torch=2.14 backend=cuda,cpu'); "
        "default: this machine's platform ('os=linux arch=x86_64'); 'all' for every platform.",
    ),
    kernel: Path | None = KERNEL_OPTION,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the images, their Dockerfile and build args; build nothing."),
    rebuild: bool = typer.Option(
        False, "--rebuild", help="Build images whose tag exists too, pulling the base image and bypassing the layer cache."
    ),
    base_image: str | None = typer.Option(
        None, "--base-image", metavar="IMAGE",
        help="The images' base (default: $KBUILD_DOCKER_BASE_IMAGE, else manylinux_2_28 for the arch).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the images as JSON."),
) -> None:
    """Build the images that the selected variants build in, tagged by the hash of their inputs; existing tags are kept."""
    from rich.markup import escape

    from kernel_builder.runners.docker_images import build_images
    from kernel_builder.errors import KbuildError

    selector = default_selector() if selector is None else selector
    variants = selected_variants(selector, kernel)
    progress = _console(stderr=True)
    say = (lambda line: None) if as_json else (lambda line: progress.print(escape(line)))
    images, skipped = build_images(variants, dry_run=dry_run, rebuild=rebuild, base_image=base_image, say=say)
    if as_json:
        data = {"images": [i.to_json() for i in images], "skipped": [{"variant": v, "reason": r} for v, r in skipped]}
        print_json(data)
    else:
        console = _console()
        for _, reason in skipped:
            console.print(f"[yellow]no image[/] {escape(reason)}")  # the reason names the variant
        for item in images:
            image = item.image
            console.print(f"[green]{item.status:8}[/] [bold]{escape(image.tag)}[/]  ({escape(image.describe())})")
            console.print(f"         Dockerfile: {escape(str(image.dockerfile))}")
            for key, value in image.build_args.items():
                console.print(f"         --build-arg {escape(key)}={escape(value)}")
            names = ", ".join(item.variants[:3]) + (f", ... ({len(item.variants)} in all)" if len(item.variants) > 3 else "")
            console.print(f"         for: {escape(names)}")
    if not images:
        raise KbuildError(
            f"none of the {len(skipped)} selected variants builds in a container (Metal and macOS variants build on a Mac)"
        )
