"""Build images for `kbuild build --runner docker`: which image builds a variant, its tag,
and building the images with the Docker SDK (`kbuild docker build-images`).

One Dockerfile per backend family lives in `docker/` (CPU, CUDA, ROCm, XPU; all on
manylinux_2_28). Each takes build args for the torch and toolkit versions; a variant
fixes them:

- torch: `TORCH_VERSION` is the variant's torch as a pip version (`2.14.*`) and
  `TORCH_INDEX_URL` the index that serves its flavour, chosen as managed environments
  choose it (kernel_builder.environments.store.pip_request); CPU images use PyTorch's CPU index
  rather than pulling a CUDA torch for nothing.
- toolkit: `CUDA_VERSION` (13.0), `ROCM_VERSION` (7.1) or `ONEAPI_VERSION` (2026.0).
- `ARCH` (x86_64, aarch64) picks the manylinux base; `KBUILD_REQUIREMENTS` are kbuild's
  runtime dependencies. kbuild's own code is not in the image: the runner mounts it.

A stable-ABI variant builds with the newest torch of the default matrix that has its
toolkit and platform and is at least its ABI version (stable-ABI code compiles against
any newer torch). A noarch variant compiles nothing and needs any torch: the newest CPU
image for this machine's architecture. Metal and macOS variants have no image.

The tag is `kbuild-build-<family>:torch<M.m>[-<compute>]-<arch>-<hash>`, the hash being
of the Dockerfile's text, the build args and the platform: the same inputs always give
the same tag, and any change to them a new one. The Dockerfiles COPY nothing, so those
are all of an image's inputs (bar what the base image and the package indexes serve).
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from kernel_builder.compile.backends.common import host_platform
from kernel_builder.environments.store import EnvSpec, pip_request
from kernel_builder.errors import KbuildError
from kernel_builder.paths import CHECKOUT_DIR, docker_dir
from kernel_builder.formatting import first_line
from kernel_builder.variants import Kind, Matrix, Variant, default_matrix


FAMILIES = ("cpu", "cuda", "rocm", "xpu")
# What the Dockerfiles install where; the runner's command and environment rely on it.
VENV = "/opt/kbuild/venv"
HOME = "/opt/kbuild/home"
# Where pip_request names no index: PyTorch's CPU-only wheels, PyPI for the rest.
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
PYPI_INDEX = "https://pypi.org/simple"
_PLATFORMS = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}
_TOOLKIT_ARG = {"cuda": "CUDA_VERSION", "rocm": "ROCM_VERSION", "xpu": "ONEAPI_VERSION"}
# AMD and Intel publish their toolkits' Enterprise Linux packages for x86_64 only.
_X86_ONLY = ("rocm", "xpu")


def dockerfile(family: str) -> Path:
    return docker_dir(f"Dockerfile.{family}")


@dataclass(frozen=True)
class ImageSpec:
    """One build image: the Dockerfile, its build args, the platform, and the tag they hash to."""

    family: str  # cpu | cuda | rocm | xpu
    dockerfile: Path
    build_args: dict[str, str] = field(hash=False)
    platform: str  # linux/amd64 | linux/arm64
    torch: tuple[int, int]  # the torch the image installs
    tag: str

    @property
    def inputs_hash(self) -> str:
        return self.tag.rsplit("-", 1)[1]

    def describe(self) -> str:
        """'CUDA 13.0, torch 2.14.*, linux/amd64'."""
        toolkit = self.build_args.get(_TOOLKIT_ARG.get(self.family, ""), "")
        name = {"cpu": "CPU", "cuda": "CUDA", "rocm": "ROCm", "xpu": "XPU"}[self.family]
        return f"{name}{' ' + toolkit if toolkit else ''}, torch {self.build_args['TORCH_VERSION']}, {self.platform}"

    def to_json(self) -> dict:
        return {
            "tag": self.tag,
            "family": self.family,
            "dockerfile": str(self.dockerfile),
            "build_args": dict(self.build_args),
            "platform": self.platform,
        }


def image_tag(family: str, dockerfile_text: str, build_args: dict[str, str], platform: str, label: str) -> str:
    """`kbuild-build-<family>:<label>-<hash of the inputs>`."""
    inputs = json.dumps(
        {"dockerfile": dockerfile_text, "build_args": dict(sorted(build_args.items())), "platform": platform},
        sort_keys=True,
    )
    return f"kbuild-build-{family}:{label}-{hashlib.sha256(inputs.encode()).hexdigest()[:12]}"


def image_for(variant: Variant, matrix: Matrix | None = None) -> ImageSpec:
    """The image that builds `variant`; a KbuildError saying why for one no container can build."""
    if variant.kind is Kind.NOARCH:
        arch = host_platform()[0]
        torch = _newest_torch(matrix, lambda v: v.backend == "cpu" and v.arch == arch and v.os == "linux")
        if torch is None:
            raise KbuildError(f"{variant.name}: the default matrix has no CPU variant for {arch}-linux to build it in")
        return _image("cpu", torch, None, arch)
    if variant.os != "linux" or variant.backend == "metal":
        needs = "macOS and Xcode" if variant.backend == "metal" else "macOS"
        raise KbuildError(
            f"{variant.name}: no build image: it needs {needs}, which no Linux container has; "
            "build it on a Mac with --runner local"
        )
    if variant.arch not in _PLATFORMS:
        raise KbuildError(f"{variant.name}: no build image for {variant.arch}; images exist for {', '.join(_PLATFORMS)}")
    if variant.backend not in FAMILIES:
        raise KbuildError(f"{variant.name}: no build image for backend {variant.backend}")
    if variant.backend in _X86_ONLY and variant.arch != "x86_64":
        raise KbuildError(f"{variant.name}: no build image: the {variant.backend} toolkit's packages are for x86_64 only")
    torch = variant.torch
    if variant.kind is Kind.STABLE_ABI:
        torch = _newest_torch(matrix, lambda v: (v.backend, v.backend_version, v.arch, v.os) == (
            variant.backend, variant.backend_version, variant.arch, variant.os) and v.torch >= variant.torch)
        if torch is None:
            raise KbuildError(
                f"{variant.name}: the default matrix has no torch >= {variant.torch_version} "
                f"with {variant.compute} on {variant.platform} to build it with"
            )
    return _image(variant.backend, torch, variant.backend_version, variant.arch)


def _newest_torch(matrix: Matrix | None, keep: Callable[[Variant], bool]) -> tuple[int, int] | None:
    matrix = matrix or default_matrix()
    found = [v.torch for v in matrix.variants if v.kind is Kind.ARCH and keep(v)]
    return max(found) if found else None


def _image(family: str, torch: tuple[int, int], toolkit: tuple[int, int] | None, arch: str) -> ImageSpec:
    compute = "cpu" if family == "cpu" else Variant(Kind.ARCH, family, torch, toolkit).compute
    requirement, index = pip_request(EnvSpec(torch, compute))
    args = {
        "ARCH": arch,
        "TORCH_VERSION": requirement.removeprefix("torch=="),
        # pip_request says None for "pip's own index": PyPI in an image; for CPU, any
        # flavour would do, and the CPU index avoids gigabytes of CUDA libraries.
        "TORCH_INDEX_URL": index or (CPU_TORCH_INDEX if family == "cpu" else PYPI_INDEX),
        "KBUILD_REQUIREMENTS": " ".join(kbuild_requirements()),
    }
    if family != "cpu":
        assert toolkit is not None
        args[_TOOLKIT_ARG[family]] = f"{toolkit[0]}.{toolkit[1]}"
    path = dockerfile(family)
    platform = _PLATFORMS[arch]
    label = f"torch{torch[0]}.{torch[1]}{'' if family == 'cpu' else '-' + compute}-{arch}"
    return ImageSpec(family, path, args, platform, torch, image_tag(family, path.read_text(), args, platform, label))


def kbuild_requirements() -> list[str]:
    """kbuild's runtime dependencies: from pyproject.toml in a checkout (an editable
    install's metadata can be older), else from the installed distribution."""
    pyproject = CHECKOUT_DIR / "pyproject.toml"
    if pyproject.is_file():
        data = tomllib.loads(pyproject.read_text())
        if data.get("project", {}).get("name") == "kbuild":
            return sorted(data["project"]["dependencies"])
    from importlib import metadata

    try:
        requires = metadata.requires("kbuild") or []
    except metadata.PackageNotFoundError:
        raise KbuildError("cannot tell kbuild's dependencies: no pyproject.toml beside it and kbuild is not installed") from None
    return sorted(r for r in requires if "extra ==" not in r)


# -- a selection's images -----------------------------------------------------------------
@dataclass(frozen=True)
class ImageBuild:
    """An image a selection needs, the variants it builds, and what became of it:
    planned (--dry-run), present (already built) or built."""

    image: ImageSpec
    variants: tuple[str, ...]
    status: str

    def to_json(self) -> dict:
        return {**self.image.to_json(), "variants": list(self.variants), "status": self.status}


def plan_images(variants: Iterable[Variant], matrix: Matrix | None = None) -> tuple[list[ImageBuild], list[tuple[str, str]]]:
    """The unique images the variants need (status "planned"), and (variant, reason) for
    each that no image can build."""
    images: dict[str, tuple[ImageSpec, list[str]]] = {}
    skipped: list[tuple[str, str]] = []
    for variant in variants:
        try:
            image = image_for(variant, matrix)
        except KbuildError as e:
            skipped.append((variant.name, e.message))
            continue
        images.setdefault(image.tag, (image, []))[1].append(variant.name)
    planned = [ImageBuild(image, tuple(names), "planned") for image, names in images.values()]
    return sorted(planned, key=lambda b: b.image.tag), skipped


def build_images(
    variants: Iterable[Variant],
    client=None,
    *,
    dry_run: bool = False,
    rebuild: bool = False,
    say: Callable[[str], None] = lambda line: None,
) -> tuple[list[ImageBuild], list[tuple[str, str]]]:
    """Build the images the variants need (plan_images), streaming the engine's output
    line by line to `say`. An image whose tag exists is kept unless `rebuild` (which also
    pulls the base image and bypasses the layer cache). `client` is a docker SDK client;
    None connects to the engine (a KbuildError when none is reachable)."""
    planned, skipped = plan_images(variants)
    if dry_run or not planned:
        return planned, skipped
    if client is None:
        from kernel_builder.runners.docker_engine import docker_client

        client = docker_client()
    done = []
    for item in planned:
        if not rebuild and _image_exists(client, item.image.tag):
            say(f"{item.image.tag}: present")
            done.append(ImageBuild(item.image, item.variants, "present"))
            continue
        say(f"{item.image.tag}: building from {item.image.dockerfile.name} ({item.image.describe()})")
        _build(client, item.image, rebuild, say)
        done.append(ImageBuild(item.image, item.variants, "built"))
    return done, skipped


def _image_exists(client, tag: str) -> bool:
    from docker.errors import ImageNotFound

    try:
        client.images.get(tag)
    except ImageNotFound:
        return False
    return True


def _build(client, image: ImageSpec, rebuild: bool, say: Callable[[str], None]) -> None:
    from docker.errors import DockerException
    from requests import RequestException

    # The Dockerfile alone is the build context: it COPYs nothing, and the tag hashes it.
    context = io.BytesIO(image.dockerfile.read_bytes())
    failed = f"building image {image.tag} from {image.dockerfile}"
    try:
        stream = client.api.build(
            fileobj=context, tag=image.tag, buildargs=dict(image.build_args), platform=image.platform,
            decode=True, rm=True, forcerm=True, pull=rebuild, nocache=rebuild,
            labels={"kbuild.family": image.family, "kbuild.inputs-hash": image.inputs_hash},
        )
        for chunk in stream:
            if "error" in chunk:
                raise KbuildError(f"{failed} failed: {first_line(chunk['error'])}")
            text = chunk.get("stream") or ("" if "progress" in chunk else chunk.get("status", ""))
            for line in str(text).splitlines():
                if line.strip():
                    say(line.rstrip())
    except (DockerException, RequestException) as e:  # the engine refused, or went away
        raise KbuildError(f"{failed} failed: {first_line(str(e))}") from None
