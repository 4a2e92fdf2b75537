"""CUDA toolkits from NVIDIA's pip wheels: nvcc without a system toolkit.

NVIDIA publishes the CUDA 13 compiler as wheels (`nvidia-cuda-nvcc` 13.0 ... 13.5, CCCL up to 13.3, with
`nvidia-cuda-runtime`, `-cccl`, `-crt` for the headers and `nvidia-nvvm` for cicc). They
install into `site-packages/nvidia/cu13/` a folder laid out like a CUDA_HOME (bin/nvcc,
nvvm/, include/, lib/), the same folder the CUDA 13 torch wheels put their runtime in, so
nvcc and torch's CUDA headers are one release by construction.

kbuild uses such a toolkit when no system nvcc of the variant's release exists: it
installs the wheels into the variant's managed build environment (compile/backends/cuda.py
asks for them at build time), or finds them already there (the docker runner's CUDA
image installs them; `--env` of an environment that has them). CUDA 12 is published as
separate per-component wheels whose folders do not form a toolkit; for it, install the
CUDA 12 toolkit.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kernel_builder.environments import download_cost, pip_run
from kernel_builder.environments.probe import BuildEnv
from kernel_builder.environments.store import base_python
from kernel_builder.errors import BuildError, KbuildError

# The CUDA releases PyPI has all five wheels of (nvidia-cuda-cccl stops at 13.3), checked against it.
WHEEL_RELEASES = tuple((13, minor) for minor in range(0, 4))
_PACKAGES = ("nvidia-cuda-nvcc", "nvidia-cuda-runtime", "nvidia-cuda-cccl", "nvidia-cuda-crt", "nvidia-nvvm")


def covered() -> str:
    """'13.0-13.3': the releases this module can install, for messages and docs."""
    first, last = WHEEL_RELEASES[0], WHEEL_RELEASES[-1]
    return f"{first[0]}.{first[1]}-{last[0]}.{last[1]}"


def requirements(cuda: tuple[int, int]) -> list[str]:
    """The pip requirements of CUDA `cuda`'s nvcc toolchain, all of that one release (the
    nvcc wheel alone would take the newest nvvm)."""
    if cuda not in WHEEL_RELEASES:
        raise KbuildError(
            f"no NVIDIA compiler wheels for CUDA {cuda[0]}.{cuda[1]} (kbuild installs nvcc from wheels for "
            f"CUDA {covered()}): install the CUDA {cuda[0]}.{cuda[1]} toolkit"
        )
    return [f"{package}=={cuda[0]}.{cuda[1]}.*" for package in _PACKAGES]


def toolkit_home(site_packages: Path, cuda: tuple[int, int]) -> Path | None:
    """The CUDA_HOME-like folder the wheels of CUDA `cuda` installed in `site_packages`
    (with bin/nvcc), or None."""
    home = site_packages / "nvidia" / f"cu{cuda[0]}"
    return home if (home / "bin" / "nvcc").is_file() else None


def complete_layout(home: Path, cuda: tuple[int, int]) -> None:
    """Add the two links the wheels lack and nvcc's link step (and CMake's) expects of a
    toolkit: lib64/ (nvcc.profile's library folder) and lib/libcudart.so (for -lcudart).
    Idempotent; docker/Dockerfile.cuda makes the same links when it builds the image."""
    links = ((home / "lib64", Path("lib")), (home / "lib" / "libcudart.so", Path(f"libcudart.so.{cuda[0]}")))
    for link, target in links:
        if link.is_symlink() or link.exists():
            continue
        try:
            link.symlink_to(target)
        except OSError as e:
            raise BuildError(f"cannot complete the CUDA toolkit from wheels in {home} ({link.name}: {e.strerror}); "
                             f"link {link} to {target}") from None


def wheel_nvcc(env: BuildEnv, cuda: tuple[int, int]) -> str | None:
    """nvcc from the wheels in `env` (beside its torch), or None."""
    home = toolkit_home(Path(env.torch_dir).parent, cuda)
    return str(home / "bin" / "nvcc") if home else None


def wheels_cost(cuda: tuple[int, int], cached_only: bool = False) -> download_cost.DownloadCost | None:
    """What the compiler wheels of CUDA `cuda` download into an environment that has none
    of them (a dry run, cached); None when pip cannot tell (or, `cached_only`, was not asked)."""
    downloads = download_cost.dry_run(base_python(), requirements(cuda), cached_only=cached_only)
    return None if downloads is None else download_cost.cost(downloads)


def install(
    env: BuildEnv, cuda: tuple[int, int], say: Callable[[str], None] = lambda line: None,
    progress: Callable[[str], None] | None = None,
) -> str:
    """Install CUDA `cuda`'s compiler wheels into `env` with its own pip; nvcc's path. `say`
    hears once what that downloads, `progress` what pip is downloading; pip's output goes to
    a log in the environment. pip keeps the runtime wheels torch pinned (same release), so
    torch is unchanged."""
    wanted = requirements(cuda)
    home = Path(env.python).parent.parent
    log = home / "kbuild-nvcc-wheels.log"
    # Asked of the environment's own pip: what it already has (the runtime torch brought) is not downloaded.
    downloads = download_cost.dry_run(env.python, wanted, ignore_installed=False)
    cost = None if downloads is None else download_cost.cost(downloads)
    size = "size unknown" if cost is None else cost.describe()
    say(f"installing nvcc {cuda[0]}.{cuda[1]} from NVIDIA's wheels into {home} (first time only): "
        f"pip install {' '.join(wanted)} — {size}")
    command = [env.python, "-m", "pip", "install", "--disable-pip-version-check", *pip_run.progress_args(env.python), *wanted]
    tracker = pip_run.PipProgress(*((cost.sizes(), cost.total) if cost else ()))
    try:
        installed = pip_run.run_logged([command], log, progress, tracker)
    except OSError as e:
        raise BuildError(f"pip could not install {' '.join(wanted)} into {env.python}: {e}") from None
    if not installed:
        reason = pip_run.pip_reason(log.read_text(errors="replace"))
        raise BuildError(f"pip could not install {' '.join(wanted)} into {env.python}: {reason}; log: {log}")
    nvcc = wheel_nvcc(env, cuda)
    if nvcc is None:
        raise BuildError(f"{' '.join(wanted)} installed into {env.python}, but no nvidia/cu{cuda[0]}/bin/nvcc came with them")
    return nvcc
