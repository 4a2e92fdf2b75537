"""Another architecture's torch, for cross builds (kernel_builder.environments.cross_target):
its wheel for the target platform, unpacked by pip (`--platform manylinux_2_28_aarch64
--only-binary=:all: --target`), never run on this machine. One folder in the store:

    <root>/torch214-cpu-aarch64/
        site/            torch alone (--no-deps): its headers and libraries, all a build needs
        emulated/        what importing torch needs beyond it (torch's own Requires-Dist: PyPI's
                         aarch64 torch is a CUDA 13.0 build, which loads NVIDIA's CUDA libraries
                         even on a CPU-only machine) plus numpy, pytest and kernels, for the
                         import check and `kbuild test`; made on their first need
        bin/python       the emulated interpreter over both (kernel_builder.environments.emulation_root)
        kbuild-env.json  the marker, written last; what `read_env` reads

A build needs only site/; what each layer downloads is said before pip starts.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from kernel_builder.environments import download_cost, emulation_root, pip_run
from kernel_builder.environments.cross_target import TARGETS, CrossTarget
from kernel_builder.environments.probe import _PROBE, BuildEnv
from kernel_builder.errors import EnvironmentCreateError
from kernel_builder.file_lock import exclusive_lock
from kernel_builder.redaction import mask_credentials

MARKER = "kbuild-env.json"  # the store's (kernel_builder.environments.store.MARKER)
EMULATED_READY = "emulated.json"  # the emulation layer's marker, written last
# What the tests and the import check run in the emulated Python besides torch's own needs.
EMULATED_EXTRAS = ("numpy", "pytest", "kernels==0.19.1")
# The aarch64 Python the emulation root has (Debian bookworm's): the wheels' Python tag.
TARGET_PYTHON = emulation_root.PYTHON


def _target(spec) -> CrossTarget:
    return TARGETS[spec.arch]


def _wheel_args(target: CrossTarget, folder: Path) -> list[str]:
    """pip's options for wheels of the target platform and Python, unpacked into `folder`."""
    platforms = [a for tag in target.pip_platforms() for a in ("--platform", tag)]
    return ["--only-binary=:all:", "--python-version", TARGET_PYTHON, "--implementation", "cp",
            *platforms, "--target", str(folder)]


def _requirement(spec) -> str:
    return f"torch=={spec.torch[0]}.{spec.torch[1]}.*"


# -- the build layer ----------------------------------------------------------------------
def creation_cost(spec, url: str | None = None, cached_only: bool = False) -> download_cost.DownloadCost | None:
    """What the build layer downloads from `url` (None: pip's configured index): torch's
    wheel for the target, with its size."""
    args = ["--no-deps", *_wheel_args(_target(spec), Path(tempfile.gettempdir()) / "kbuild-cross-dry-run")]
    downloads = download_cost.dry_run(sys.executable, [_requirement(spec)], args, cached_only=cached_only,
                                      index_url=url)
    return None if downloads is None else download_cost.cost(downloads)


def create(spec, path: Path, url: str | None, say: Callable[[str], None],
           progress: Callable[[str], None] | None, remove: Callable[[Path], None]) -> BuildEnv:
    """The build layer: torch's wheel for the target platform from `url` (None: pip's
    configured index), unpacked into path/site."""
    log = path.with_name(f"{spec.key}.log")
    requirement = _requirement(spec)

    def fail(reason: str) -> EnvironmentCreateError:
        source = mask_credentials(url) if url else "pip's configured index"
        return EnvironmentCreateError(
            f"cannot create build environment {spec.key}: pip install {requirement} for {spec.arch} from {source}: "
            f"{reason}; log: {log}")

    remove(path)
    cost = creation_cost(spec, url)
    size = "size unknown" if cost is None else cost.describe(["torch"])
    target = _target(spec)
    say(f"creating build environment {spec.key} (first time only): torch's {target.arch} wheel, "
        f"pip install --platform {target.pip_platforms()[0]} --only-binary=:all: --no-deps {requirement} — {size}")
    install = [sys.executable, "-m", "pip", "install", *pip_run.progress_args(sys.executable), "--no-deps",
               *_wheel_args(target, path / "site"), requirement]
    tracker = pip_run.PipProgress(*((cost.sizes(), cost.total) if cost else ()))
    try:
        path.mkdir(parents=True)
        if not pip_run.run_logged([install], log, progress, tracker, environment=pip_run.pip_environment(url)):
            raise fail(pip_run.pip_reason(log.read_text(errors="replace")))
        env = _probe(path, spec.arch)
        if env.torch != spec.torch:
            raise fail(f"it installed torch {env.torch_version}, not {spec.describe()}")
        _write_json(path / MARKER, {
            "format": 1, "key": spec.key, "torch": f"{spec.torch[0]}.{spec.torch[1]}", "compute": spec.compute,
            "arch": spec.arch, "requirement": requirement, "index": mask_credentials(url),
            "torch_version": env.torch_version, "python": env.python,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "env": asdict(env),
        })
    except OSError as e:
        remove(path)
        raise fail(str(e)) from None
    except BaseException:
        remove(path)
        raise
    return env


def _probe(path: Path, arch: str) -> BuildEnv:
    """The unpacked torch as a BuildEnv: what its files state, read by this machine's Python
    (kernel_builder.environments.probe's script, with only path/site on its path). Python's
    headers are this interpreter's: kbuild compiles against the limited API, whose headers
    are the same for both 64-bit Linux architectures."""
    done = subprocess.run([sys.executable, "-S", "-c", _PROBE], capture_output=True, text=True, check=False,
                          env={"PYTHONPATH": str(path / "site"), "PATH": "/usr/bin:/bin"})
    try:
        data = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        data = {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    if "error" in data or not data.get("torch_dir", "").startswith(str(path)):
        raise EnvironmentCreateError(f"{path / 'site'} holds no readable torch: {data.get('error', 'another torch was found')}")
    data.update(python=str(path / "bin" / "python"), python_version=TARGET_PYTHON, arch=arch)
    return BuildEnv(**data)


def read_env(path: Path) -> BuildEnv | None:
    """The BuildEnv a complete cross environment's marker records, or None."""
    try:
        return BuildEnv(**json.loads((path / MARKER).read_text())["env"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


# -- the emulation layer ------------------------------------------------------------------
def _torch_needs(env: BuildEnv) -> list[str]:
    """torch's Requires-Dist for the target (markers judged for Linux on its architecture)."""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    site = Path(env.torch_dir).parent
    found = sorted(site.glob("torch-*.dist-info/METADATA"))
    if not found:
        return []
    marker_env = {**default_environment(), "platform_machine": env.arch or "", "platform_system": "Linux",
                  "sys_platform": "linux", "python_version": TARGET_PYTHON, "python_full_version": f"{TARGET_PYTHON}.0"}
    needs = []
    for line in found[0].read_text(errors="replace").splitlines():
        if line.startswith("Requires-Dist:"):
            requirement = Requirement(line.split(":", 1)[1].strip())
            if requirement.marker is None or requirement.marker.evaluate({**marker_env, "extra": ""}):
                needs.append(str(requirement).split(";")[0].strip())
    return needs


def emulation_requirements(env: BuildEnv) -> list[str]:
    return [*_torch_needs(env), *EMULATED_EXTRAS]


def emulation_cost(env: BuildEnv, cached_only: bool = False) -> download_cost.DownloadCost | None:
    """What the emulation layer downloads: torch's needs, numpy, pytest and kernels for the target."""
    return layer_cost(env, emulation_requirements(env), cached_only)


def layer_cost(env: BuildEnv, requirements: list[str], cached_only: bool = False) -> download_cost.DownloadCost | None:
    """What installing `requirements` for the env's architecture downloads (a cached dry run)."""
    target = TARGETS[env.arch]  # type: ignore[index]
    downloads = download_cost.dry_run(
        sys.executable, requirements,
        _wheel_args(target, Path(tempfile.gettempdir()) / "kbuild-cross-dry-run"), cached_only=cached_only)
    return None if downloads is None else download_cost.cost(downloads)


def emulated_ready(env: BuildEnv) -> bool:
    """Whether the env's emulated Python can run now (nothing to download or unpack)."""
    path = Path(env.python).parent.parent
    return (path / EMULATED_READY).is_file() and emulation_root.ready(TARGETS[env.arch], path.parent)


def emulated_python(env: BuildEnv, say: Callable[[str], None] = lambda line: None,
                    progress: Callable[[str], None] | None = None) -> str:
    """The env's emulated Python, with torch importable: the emulation root and this env's
    emulation layer made on first need (each download said first). Raises KbuildError with
    the install command when the emulator is missing."""
    target = TARGETS[env.arch]  # type: ignore[index]
    path = Path(env.python).parent.parent
    root = emulation_root.ensure(target, path.parent, say, progress)  # beside the environments
    with exclusive_lock(path.with_name(f"{path.name}.emulated.lock")):
        if not (path / EMULATED_READY).is_file():
            _install_emulated(env, path, target, say, progress)
        emulation_root.write_launcher(target, root, path / "bin" / "python", [path / "site", path / "emulated"])
    return env.python


def runnable_python(env: BuildEnv, say: Callable[[str], None] = lambda line: None,
                    progress: Callable[[str], None] | None = None) -> str:
    """The interpreter that imports what `env` builds: its own, or for another architecture's
    torch its emulated Python, made ready first (emulated_python)."""
    return env.python if env.arch is None else emulated_python(env, say, progress)


def _install_emulated(env: BuildEnv, path: Path, target: CrossTarget, say: Callable[[str], None],
                      progress: Callable[[str], None] | None) -> None:
    requirements = emulation_requirements(env)
    install_layer(env, "emulated", requirements, f"{target.arch} runtime for the emulated import check and tests",
                  say, progress, named=["kernels"])
    _write_json(path / EMULATED_READY, {"requirements": requirements,
                                        "created": datetime.now(timezone.utc).isoformat(timespec="seconds")})


def install_layer(env: BuildEnv, name: str, requirements: list[str], what: str, say: Callable[[str], None],
                  progress: Callable[[str], None] | None, named: list[str] | None = None) -> Path:
    """Unpack `requirements` (wheels for the env's architecture, resolved together) into a
    fresh folder `name` of the environment, saying first what that downloads; the folder.
    One pip run per folder: NVIDIA's wheels share the nvidia/ namespace folder, which a
    second `pip install --target` into the same folder would not merge."""
    target = TARGETS[env.arch]  # type: ignore[index]
    path = Path(env.python).parent.parent
    folder = path / name
    log = path.with_name(f"{path.name}.{name}.log")
    cost = layer_cost(env, requirements)
    size = "size unknown" if cost is None else cost.describe(named or [])
    say(f"{what} (first time only): pip install --platform {target.pip_platforms()[0]} {shlex.join(requirements)} — {size}")
    shutil.rmtree(folder, ignore_errors=True)
    install = [sys.executable, "-m", "pip", "install", *pip_run.progress_args(sys.executable),
               *_wheel_args(target, folder), *requirements]
    tracker = pip_run.PipProgress(*((cost.sizes(), cost.total) if cost else ()))
    if not pip_run.run_logged([install], log, progress, tracker):
        shutil.rmtree(folder, ignore_errors=True)
        raise EnvironmentCreateError(
            f"cannot install the {what} of {path.name}: {pip_run.pip_reason(log.read_text(errors='replace'))}; "
            f"log: {log}")
    return folder


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f"{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)  # atomic: complete exactly when the file exists
