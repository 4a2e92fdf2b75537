"""`kbuild docker build-images`: the build images of a selection of variants (the `--matrix`
syntax; kernel_builder.pipeline.selection), made by kernel_builder.runners.docker_images."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kernel_builder.runtime.system import host_platform
from kernel_builder.errors import KbuildError
from kernel_builder.kernel.manifest import load_manifest
from kernel_builder.pipeline.selection import select, select_from_matrix
from kernel_builder.runners.docker_images import ImageBuild, build_images
from kernel_builder.variants import Variant


def host_selector() -> str:
    """What build-images builds without a selector: this machine's platform only (others
    would need emulation); 'all' asks for every Linux platform of the matrix."""
    return f"os=linux arch={host_platform()[0]}"


def image_variants(selector: str | None, kernel_dir: Path | None = None) -> list[Variant]:
    """The variants of the default matrix that `selector` (default: host_selector) keeps,
    among those the kernel in `kernel_dir` admits when given."""
    selector = host_selector() if selector is None else selector
    if kernel_dir is not None:
        return select(load_manifest(kernel_dir), selector)
    return select_from_matrix(selector, f"build-images '{selector}'")


@dataclass(frozen=True)
class SelectedImages:
    images: list[ImageBuild]
    skipped: list[tuple[str, str]]  # (variant, why it has no image: the reason names the variant)

    def to_json(self) -> dict:
        return {"images": [i.to_json() for i in self.images], "skipped": [{"variant": v, "reason": r} for v, r in self.skipped]}

    def require_some(self) -> None:
        """A KbuildError when no selected variant builds in a container."""
        if not self.images:
            raise KbuildError(
                f"none of the {len(self.skipped)} selected variants builds in a container "
                "(Metal and macOS variants build on a Mac)"
            )


def build_selected_images(
    selector: str | None, kernel_dir: Path | None = None, *, dry_run: bool = False, rebuild: bool = False,
    base_image: str | None = None, say: Callable[[str], None] = lambda line: None,
) -> SelectedImages:
    """Build the images of image_variants(selector, kernel_dir) (runners.docker_images.build_images:
    existing tags are kept unless `rebuild`; `dry_run` builds nothing)."""
    images, skipped = build_images(
        image_variants(selector, kernel_dir), dry_run=dry_run, rebuild=rebuild, base_image=base_image, say=say,
    )
    return SelectedImages(images, skipped)
