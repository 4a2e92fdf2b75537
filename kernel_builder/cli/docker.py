"""`kbuild docker ...`: the build images of the docker runner (kernel_builder.pipeline.images)."""

from __future__ import annotations

from pathlib import Path

import typer

from kernel_builder.cli.output import console as _console
from kernel_builder.cli.output import print_json, new_app

docker_app = new_app("Build images for `kbuild build --runner docker`: one per backend family, torch and toolkit version.")


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

    from kernel_builder.pipeline.images import build_selected_images

    progress = _console(stderr=True)
    say = (lambda line: None) if as_json else (lambda line: progress.print(escape(line)))
    built = build_selected_images(selector, kernel, dry_run=dry_run, rebuild=rebuild, base_image=base_image, say=say)
    if as_json:
        print_json(built.to_json())
    else:
        console = _console()
        for _, reason in built.skipped:
            console.print(f"[yellow]no image[/] {escape(reason)}")  # the reason names the variant
        for item in built.images:
            image = item.image
            console.print(f"[green]{item.status:8}[/] [bold]{escape(image.tag)}[/]  ({escape(image.describe())})")
            console.print(f"         Dockerfile: {escape(str(image.dockerfile))}")
            for key, value in image.build_args.items():
                console.print(f"         --build-arg {escape(key)}={escape(value)}")
            names = ", ".join(item.variants[:3]) + (f", ... ({len(item.variants)} in all)" if len(item.variants) > 3 else "")
            console.print(f"         for: {escape(names)}")
    built.require_some()
