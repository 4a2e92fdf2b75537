"""Build images for `kbuild build --runner docker`: which image builds a variant, its tag,
and building the images (`kbuild docker build-images`).

One Dockerfile per backend family lives in `docker/` (CPU, CUDA, ROCm, XPU). Each takes
build args for its base image and the torch and toolkit versions; a variant fixes them:

- base: `BASE_IMAGE`, manylinux_2_28 for the variant's arch unless `--base-image` or
  $KBUILD_DOCKER_BASE_IMAGE names another (CPU and CUDA images install everything with pip,
  so any glibc Linux with python3, g++ and git will do: docker/offline-base.sh makes one
  from Debian's packages; ROCm and XPU install their toolkits with dnf, so they need an
  Enterprise Linux base such as manylinux).
- torch: `TORCH_VERSION` is the variant's torch as a pip version (`2.14.*`) and
  `TORCH_INDEX_URL` the index that serves its flavour, chosen as managed environments
  choose it (kernel_builder.environments.store.pip_request); empty means pip's own
  configuration, which the image build takes from the host (runners/pip_forwarding.py).
  The build arg is the URL with its credentials masked; the URL itself reaches the
  torch install as the BuildKit secret `torch-index-url` (never a layer or the history).
- toolkit: `CUDA_VERSION` (13.0) with `TOOLKIT_REQUIREMENTS`, NVIDIA's compiler wheels of
  that release (environments/cuda_wheels.py); `ROCM_VERSION` (7.1) or `ONEAPI_VERSION` (2026.0).
- `KBUILD_REQUIREMENTS` are kbuild's runtime dependencies. kbuild's own code is not in the
  image: the runner mounts it.

A stable-ABI variant builds with the newest torch of the default matrix that has its
toolkit and platform and is at least its ABI version (stable-ABI code compiles against
any newer torch). A noarch variant compiles nothing and needs any torch: the newest CPU
image for this machine's architecture. Metal and macOS variants have no image.

The platform is the variant arch's (linux/arm64 for aarch64, run through qemu on other
machines: runners/docker_platform.py); the base image must be of that platform.

The tag is `kbuild-build-<family>:torch<M.m>[-<compute>]-<arch>-<hash>`, the hash being
of the Dockerfile's text, the build args (the base image's name among them) and the
platform: the same inputs always give the same tag, and any change to them a new one. The
Dockerfiles COPY nothing, so those are all of an image's inputs (bar what the base image
and the package indexes serve). pip's settings are not inputs: they say where packages
come from, not which.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from kernel_builder.backend_facts import ALL as ALL_FACTS, FACTS, FALLBACK
from kernel_builder.compile.backends import get_backend
from kernel_builder.runtime.system import host_platform
from kernel_builder.environments.store import EnvSpec, pip_request
from kernel_builder.errors import KbuildError
from kernel_builder.paths import CHECKOUT_DIR, docker_dir
from kernel_builder.formatting import first_line
from kernel_builder.redaction import mask_credentials
from kernel_builder.runners.docker_platform import PLATFORMS, emulated, image_platform, require_runnable
from kernel_builder.settings import read_environment
from kernel_builder.variants import Kind, Matrix, Variant, default_matrix


# One image family (docker/Dockerfile.<family>) per backend a Linux container builds: the
# fallback's, and each one whose toolkit version is a build argument.
FAMILIES = tuple(sorted(f.name for f in ALL_FACTS if f.name == FALLBACK or f.toolkit_build_arg))
# What the Dockerfiles install where; the runner's command and environment rely on it.
VENV = "/opt/kbuild/venv"
HOME = "/opt/kbuild/home"
# The BuildKit secret holding the torch index URL (the Dockerfiles read /run/secrets/<id>).
TORCH_INDEX_SECRET = "torch-index-url"


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
    # The index with its credentials: a BuildKit secret of the build, never a build arg
    # (those stay in the image's history) nor printed; TORCH_INDEX_URL holds it masked.
    torch_index: str = field(default="", repr=False, compare=False)

    @property
    def inputs_hash(self) -> str:
        return self.tag.rsplit("-", 1)[1]

    def describe(self) -> str:
        """'CUDA 13.0, torch 2.14.*, linux/amd64'."""
        toolkit = self.build_args.get(FACTS[self.family].toolkit_build_arg or "", "")
        return f"{FACTS[self.family].display}{' ' + toolkit if toolkit else ''}, torch {self.build_args['TORCH_VERSION']}, {self.platform}"

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


def default_base_image(arch: str) -> str:
    """manylinux_2_28 for the arch: glibc 2.28, so what it builds loads on any manylinux_2_28 Linux."""
    return f"quay.io/pypa/manylinux_2_28_{arch}"


def chosen_base_image(base_image: str | None) -> str | None:
    """--base-image, else $KBUILD_DOCKER_BASE_IMAGE, else None (manylinux_2_28 per arch)."""
    return base_image or read_environment().docker_base_image


def image_for(
    variant: Variant, matrix: Matrix | None = None, base_image: str | None = None, torch_index: str | None = None
) -> ImageSpec:
    """The image that builds `variant` (from `base_image`, else chosen_base_image's; its torch
    from `torch_index`, else as pip_request chooses); a KbuildError saying why for one no
    container can build."""
    base_image = chosen_base_image(base_image)
    if variant.kind is Kind.NOARCH:
        arch = host_platform()[0]
        torch = _newest_torch(matrix, lambda v: v.backend == FALLBACK and v.arch == arch and v.os == "linux")
        if torch is None:
            raise KbuildError(f"{variant.name}: the default matrix has no CPU variant for {arch}-linux to build it in")
        return _image(FALLBACK, torch, None, arch, base_image, torch_index)
    record = FACTS.get(variant.backend)
    if variant.os != "linux" or (record is not None and record.min_macos):
        needs = "macOS and Xcode" if record is not None and record.min_macos else "macOS"
        raise KbuildError(
            f"{variant.name}: no build image: it needs {needs}, which no Linux container has; "
            "build it on a Mac with --runner local"
        )
    if variant.arch not in PLATFORMS:
        raise KbuildError(f"{variant.name}: no build image for {variant.arch}; images exist for {', '.join(PLATFORMS)}")
    if variant.backend not in FAMILIES:
        raise KbuildError(f"{variant.name}: no build image for backend {variant.backend}")
    if FACTS[variant.backend].x86_only_images and variant.arch != "x86_64":
        raise KbuildError(f"{variant.name}: no build image: the {variant.backend} toolkit's packages are for x86_64 only")
    if variant.backend_version is not None:
        try:
            get_backend(variant.backend).toolkit_wheels(variant.backend_version)  # e.g. the image's nvcc
        except KbuildError as e:
            raise KbuildError(f"{variant.name}: no build image: {e.message}") from None
    torch = variant.torch
    if variant.kind is Kind.STABLE_ABI:
        torch = _newest_torch(matrix, lambda v: (v.backend, v.backend_version, v.arch, v.os) == (
            variant.backend, variant.backend_version, variant.arch, variant.os) and v.torch >= variant.torch)
        if torch is None:
            raise KbuildError(
                f"{variant.name}: the default matrix has no torch >= {variant.torch_version} "
                f"with {variant.compute} on {variant.platform} to build it with"
            )
    return _image(variant.backend, torch, variant.backend_version, variant.arch, base_image, torch_index)


def _newest_torch(matrix: Matrix | None, keep: Callable[[Variant], bool]) -> tuple[int, int] | None:
    matrix = matrix or default_matrix()
    found = [v.torch for v in matrix.variants if v.kind is Kind.ARCH and keep(v)]
    return max(found) if found else None


def _image(
    family: str, torch: tuple[int, int], toolkit: tuple[int, int] | None, arch: str, base_image: str | None,
    torch_index: str | None,
) -> ImageSpec:
    compute = FACTS[family].compute(toolkit)
    requirement, index = pip_request(EnvSpec(torch, compute), torch_index)
    args = {
        "BASE_IMAGE": base_image or default_base_image(arch),
        "TORCH_VERSION": requirement.removeprefix("torch=="),
        # None is "pip's own indexes", which the build takes from the host's pip settings.
        "TORCH_INDEX_URL": mask_credentials(index or ""),
        "KBUILD_REQUIREMENTS": " ".join(kbuild_requirements()),
    }
    toolkit_arg = FACTS[family].toolkit_build_arg
    if toolkit_arg:
        assert toolkit is not None
        args[toolkit_arg] = f"{toolkit[0]}.{toolkit[1]}"
    wheels = get_backend(family).toolkit_wheels(toolkit) if toolkit else ()
    if wheels:
        args["TOOLKIT_REQUIREMENTS"] = " ".join(wheels)
    path = dockerfile(family)
    platform = image_platform(arch)
    label = f"torch{torch[0]}.{torch[1]}{'' if family == FALLBACK else '-' + compute}-{arch}"
    tag = image_tag(family, path.read_text(), args, platform, label)
    return ImageSpec(family, path, args, platform, torch, tag, torch_index=index or "")


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


def plan_images(
    variants: Iterable[Variant], matrix: Matrix | None = None, base_image: str | None = None,
    torch_index: str | None = None,
) -> tuple[list[ImageBuild], list[tuple[str, str]]]:
    """The unique images the variants need (status "planned"), and (variant, reason) for
    each that no image can build."""
    images: dict[str, tuple[ImageSpec, list[str]]] = {}
    skipped: list[tuple[str, str]] = []
    for variant in variants:
        try:
            image = image_for(variant, matrix, base_image, torch_index)
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
    base_image: str | None = None,
    torch_index: str | None = None,
    build_missing: bool = True,
    say: Callable[[str], None] = lambda line: None,
) -> tuple[list[ImageBuild], list[tuple[str, str]]]:
    """Build the images the variants need (plan_images; their torch from `torch_index` when
    given) with BuildKit, streaming the build's output line by line to `say`. An image whose
    tag exists is kept unless `rebuild` (which also pulls the base image and bypasses the
    layer cache). Without `build_missing`, the variants of an image that would be built are
    skipped instead (--no-create-env). `client` is a docker SDK client; None connects to the
    engine (a KbuildError when none is reachable)."""
    planned, skipped = plan_images(variants, base_image=base_image, torch_index=torch_index)
    if dry_run or not planned:
        return planned, skipped
    if client is None:
        from kernel_builder.runners.docker_engine import docker_client

        client = docker_client()
    done = []
    for item in planned:
        require_runnable(item.image.platform)  # before any build: an emulated platform needs qemu
        # A base remade under the same name (offline-base.sh) is a new input too.
        base = _local_image(client, item.image.build_args["BASE_IMAGE"])  # None: not pulled yet, the build pulls it
        _require_platform(item.image, base)
        base_id = base.id if base else None
        existing = None if rebuild else _local_image(client, item.image.tag)
        if existing is not None and base_id in (None, (existing.labels or {}).get(BASE_ID_LABEL)):
            say(f"{item.image.tag}: present")
            done.append(ImageBuild(item.image, item.variants, "present"))
            continue
        why = "its base changed, rebuilding" if existing is not None else "building"
        if not build_missing:
            state = "is out of date (its base changed)" if existing is not None else "is not built"
            skipped += [(name, f"its build image {item.image.tag} {state}, and --no-create-env builds none: "
                               "run `kbuild docker build-images` first") for name in item.variants]
            continue
        say(f"{item.image.tag}: {why} from {item.image.dockerfile.name} ({item.image.describe()})")
        _build(item.image, rebuild, base_id, say)
        done.append(ImageBuild(item.image, item.variants, "built"))
    return done, skipped


BASE_ID_LABEL = "kbuild.base-id"


def _local_image(client, tag: str):
    """The engine's image `tag`, or None when it has none."""
    from docker.errors import ImageNotFound

    try:
        return client.images.get(tag)
    except ImageNotFound:
        return None


def _require_platform(image: ImageSpec, base) -> None:
    """A KbuildError when the local base image is another platform's than `image`'s: the
    engine keeps one platform per tag, and BuildKit would try to pull the right one."""
    arch = (base.attrs.get("Architecture") or "") if base is not None else ""
    wanted = image.platform.split("/")[1]
    if arch and arch != wanted:
        raise KbuildError(
            f"the base image {image.build_args['BASE_IMAGE']} is linux/{arch}, but {image.tag} is a {image.platform} "
            f"image: give --base-image a {image.platform} base (docker/offline-base.sh bookworm {wanted} makes one)"
        )


def _build(image: ImageSpec, rebuild: bool, base_id: str | None, say: Callable[[str], None]) -> None:
    from kernel_builder.runners.image_builder import build_image
    from kernel_builder.runners.pip_forwarding import forwarded_pip

    labels = {"kbuild.family": image.family, "kbuild.inputs-hash": image.inputs_hash, BASE_ID_LABEL: base_id or ""}
    with forwarded_pip() as pip:
        if image.torch_index:
            pip.add_secret(TORCH_INDEX_SECRET, image.torch_index)
        platform = image.platform if emulated(image.platform) else None
        build_image(image.dockerfile, image.tag, dict(image.build_args), labels, pip,
                    platform=platform, rebuild=rebuild, say=say)


# -- what an image's base gives ------------------------------------------------------------
MANYLINUX_GLIBC = (2, 28)


@functools.cache
def image_glibc(client, tag: str) -> tuple[int, int]:
    """The glibc version of an image (its base's), from a throwaway container without network."""
    from docker.errors import DockerException
    from requests import RequestException

    probe = "import platform; print(platform.libc_ver()[1])"
    try:
        out = client.containers.run(tag, [f"{VENV}/bin/python", "-c", probe], remove=True, network_mode="none")
    except (DockerException, RequestException) as e:
        raise KbuildError(f"cannot tell the glibc of {tag}: {first_line(str(e))}") from None
    text = out.decode(errors="replace").strip()
    try:
        major, minor = text.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        raise KbuildError(f"cannot tell the glibc of {tag}: its python says {text!r}") from None


def glibc_policy(glibc: tuple[int, int]) -> str:
    """The manylinux policy what an image builds can meet: manylinux_2_28 on a base whose
    glibc is 2.28 or older, else the base's own (manylinux_2_36 on Debian bookworm)."""
    meets = max(glibc, MANYLINUX_GLIBC)
    return f"manylinux_{meets[0]}_{meets[1]}"
