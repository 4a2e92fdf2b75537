"""A kernel's runtime environment: the Python packages a kernel needs at import time, and an
interpreter that has them on top of a build environment's torch.

What a kernel needs (`RuntimeNeeds`) is read from two places, by one scanner:
- its declared `python-depends` (build.toml, or metadata.json of a built variant), mapped to pip
  names the way the kernels runtime maps them (its python_depends.json: tvm-ffi -> apache-tvm-ffi)
  at the release kernel-builder pins for the kernel (python_pins: nvidia-cutlass-dsl==4.5.0);
- the imports of its Python package: every absolute `import x` / `from x import` whose top-level
  module is not the standard library, torch, the package itself or a declared dependency, as the
  distribution that provides it (import_names: `attr` is attrs). A module no known distribution
  provides (one built from source such as apex, or any name the table lacks) is never installed
  by its name, which on an index could be anyone's: it is `unresolved`, and where the base
  interpreter lacks it too (`unmet_imports`) the caller names it in one line. Imports guarded by
  `try: ... except ImportError` are optional and not needs. `triton` is one such need.

`runtime_python(base, packages)` gives an interpreter that sees everything `base` has (its torch)
plus `packages`: a small venv in kbuild's cache whose site-packages holds a .pth file adding the
base's site-packages, with only the packages the base lacks pip-installed into it. It is made once
per (base interpreter, sorted packages), under a lock; a `ready` marker written last means an
interrupted creation is redone, never used.

The rule the import check follows: a need that pip cannot install here (offline, no wheel for
this platform, a name that is not on the index) raises `RuntimeEnvError`, and the check is
skipped with that reason. An import that fails in an environment where every need is installed is
a real error of the kernel (ModuleNotFoundError of its own module, NameError, ...), and fails.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterable, Sequence

from kernel_builder.paths import cache_dir, short_key
from kernel_builder.environments import python_pins
from kernel_builder.environments.import_names import installed_modules, provider
from kernel_builder.environments.pip_run import pip_reason
from kernel_builder.errors import KbuildError
from kernel_builder.file_lock import exclusive_lock


READY = "ready"  # an overlay's marker, written last: its creation finished


class RuntimeEnvError(KbuildError):
    """A kernel's runtime needs could not be installed: what, and pip's own last error line."""


@dataclass(frozen=True)
class RuntimeNeeds:
    packages: tuple[str, ...]  # pip requirement strings, e.g. ("einops", "triton")
    why: tuple[tuple[str, str], ...]  # (package, reason)
    # (module, why): imported, but no known distribution provides it, so nothing is installed for it
    unresolved: tuple[tuple[str, str], ...] = ()

    def unmet_imports(self, python: str) -> list[tuple[str, str]]:
        """The unresolved modules `python` lacks too: (module, one line naming the file and why)."""
        if not self.unresolved:
            return []
        installed = installed_modules(python)
        return [(module, why) for module, why in self.unresolved if not installed.get(module)]


# Always present wherever torch is (torch's own dependencies), never a need.
_WITH_TORCH = {"torch", "typing_extensions", "sympy", "networkx", "jinja2", "filelock", "fsspec"}


def kernel_runtime_needs(manifest, backend: str) -> RuntimeNeeds:
    """The runtime needs of a kernel repo's `backend` variant (build.toml + torch-ext/<python_name>/)."""
    depends = list(manifest.general.all_python_depends(backend))
    return _needs(depends, manifest.package_dir, manifest.python_name, "build.toml", python_pins.kernel_pins(manifest.root))


def variant_runtime_needs(folder: Path, metadata: dict) -> RuntimeNeeds:
    """The runtime needs of a built variant folder, from its metadata.json and its own Python files."""
    folder = Path(folder)
    name = metadata.get("name", "").replace("-", "_") or folder.name
    # As the runtime imports it: the variant folder itself, or the package one level down.
    package = folder / name if not (folder / "__init__.py").is_file() and (folder / name).is_dir() else folder
    return _needs(metadata.get("python-depends", []), package, name, "metadata.json", python_pins.variant_pins(metadata))


def _needs(depends: Iterable[str], package_dir: Path, python_name: str, declared_in: str, pins: dict[str, str]) -> RuntimeNeeds:
    packages: dict[str, str] = {}
    provided = set()
    for dep in depends:
        # kernel-builder's release of it (python_pins): the newest can lack what the kernel uses.
        packages.setdefault(python_pins.requirement(dep, pins), f"{declared_in} python-depends lists {dep}")
        provided.add(python_pins.module(dep))
    skip = set(sys.stdlib_module_names) | _WITH_TORCH | provided | {python_name, "_ops", "__future__"}
    unresolved: dict[str, str] = {}
    for module, where in _third_party_imports(package_dir):
        if module in skip:
            continue
        found = provider(module, {})  # by what provides it: an index may serve anyone's `module`
        if found.distribution:
            packages.setdefault(found.distribution, f"{where} imports {module}")
        else:
            unresolved.setdefault(module, f"{where} imports {module}: {found.reason}")
    names = tuple(sorted(packages))
    return RuntimeNeeds(packages=names, why=tuple((n, packages[n]) for n in names), unresolved=tuple(unresolved.items()))


def _third_party_imports(package_dir: Path) -> list[tuple[str, str]]:
    """(top-level module, file) for each absolute, non-optional import that importing the
    package runs: module-level code (not function bodies, not `if TYPE_CHECKING:`) of
    `__init__.py` and `layers`, and of the package modules they import in turn. A module
    nothing imports (an optional backend such as einops' layers/flax.py) adds no needs."""
    found: list[tuple[str, str]] = []
    if not package_dir.is_dir():
        return found
    root = package_dir.parent.parent if package_dir.parent.name == "torch-ext" else package_dir.parent
    queue = [m for m in (package_dir / "__init__.py", package_dir / "layers.py", package_dir / "layers" / "__init__.py") if m.is_file()]
    seen: set[Path] = set()
    while queue:
        path = queue.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            tree = ast.parse(path.read_text(errors="replace"), filename=str(path))
        except SyntaxError:
            continue  # the import check reports it with its real message
        where = str(path.relative_to(root))
        optional = _optional_imports(tree)
        for node in _import_time_nodes(tree):
            if id(node) in optional:
                continue
            if isinstance(node, ast.Import):
                found += [(alias.name.split(".")[0], where) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.append((node.module.split(".")[0], where))
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                queue += _package_modules(path, node, package_dir)
    return found


def _import_time_nodes(tree: ast.AST):
    """The statements an import of the module executes: everything but function bodies
    and `if TYPE_CHECKING:` blocks."""
    stack = list(ast.iter_child_nodes(tree))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack += node.orelse
            continue
        yield node
        stack += list(ast.iter_child_nodes(node))


def _package_modules(importer: Path, node: ast.ImportFrom, package_dir: Path) -> list[Path]:
    """The files of the package that a relative `from .x import y` (or `from . import y`) loads."""
    base = importer.parent
    for _ in range(node.level - 1):
        base = base.parent
    if node.module:
        base = base.joinpath(*node.module.split("."))
        targets = [base]
    else:
        targets = [base / alias.name for alias in node.names]
    files = []
    for target in targets:
        for candidate in (target.with_suffix(".py"), target / "__init__.py"):
            if candidate.is_file() and package_dir in candidate.parents:
                files.append(candidate)
        if target != base or not node.module:
            continue
        # `from .pkg import sub`: sub may itself be a module of the package
        files += [f for alias in node.names for f in (target / f"{alias.name}.py", target / alias.name / "__init__.py") if f.is_file()]
    return files


def _optional_imports(tree: ast.AST) -> set[int]:
    """ids of import nodes inside a `try:` that catches ImportError (or everything)."""
    optional: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        catches = [ast.unparse(h.type) if h.type else "" for h in node.handlers]
        if any(c == "" or "ImportError" in c or "ModuleNotFoundError" in c or c == "Exception" for c in catches):
            for stmt in node.body:
                optional |= {id(n) for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return optional


def runtime_python(base_python: str, packages: Sequence[str]) -> str:
    """An interpreter seeing base_python's packages plus `packages` (module docstring)."""
    if not packages:
        return base_python
    base = _base_info(base_python)
    missing = list(_missing(base, packages).values())
    if not missing:
        return base_python
    key = short_key(json.dumps([os.path.realpath(base["executable"]), base["prefix"], missing]))
    root = cache_dir("runtime-envs")
    env = root / key
    python = env / "bin" / "python"
    ready = env / READY
    if ready.is_file():
        _touch(ready)
        return str(python)
    with exclusive_lock(root / f"{key}.lock"):
        if ready.is_file():
            _touch(ready)
            return str(python)
        shutil.rmtree(env, ignore_errors=True)  # a creation that was interrupted
        try:
            _create(env, base, missing)
        except BaseException:
            shutil.rmtree(env, ignore_errors=True)
            raise
        ready.write_text(json.dumps({"base": base_python, "packages": missing}) + "\n")
    return str(python)


def missing_requirements(base_python: str, packages: Sequence[str]) -> dict[str, str]:
    """package -> the requirement `runtime_python` installs for it (`triton==3.5.0`), for those
    of `packages` that base_python lacks: what an overlay adds, listed before pip runs."""
    return _missing(_base_info(base_python), packages) if packages else {}


def _missing(base: dict, packages: Sequence[str]) -> dict[str, str]:
    wanted = sorted(set(packages))
    return {p: _pin_to_torch(p, base["torch"]) for p in wanted if not _satisfied(p, base["dists"])}


def _satisfied(requirement: str, dists: dict[str, str]) -> bool:
    """The base has the package, and the pinned release where `requirement` pins one
    (`nvidia-cutlass-dsl==4.5.0`): a base with another release gets the pin in the overlay."""
    have = dists.get(_normalize(requirement))
    if have is None:
        return False
    _, _, pinned = requirement.partition("==")
    return not pinned or have == pinned


def _touch(ready: Path) -> None:
    # The marker's mtime is the overlay's "last used", which `kbuild env prune --older-than` reads.
    try:
        os.utime(ready)
    except OSError:
        pass


# -- listing and pruning (`kbuild env list` / `kbuild env prune`) ----------------------------

@dataclass(frozen=True)
class Overlay:
    """One cached overlay environment: `packages` installed on top of the `base` interpreter."""

    key: str
    path: Path
    base: str | None
    packages: tuple[str, ...]
    complete: bool  # its creation finished and its base interpreter still exists
    size_bytes: int
    last_used: datetime | None

    def to_json(self) -> dict:
        return {
            "key": self.key, "path": str(self.path), "base": self.base, "packages": list(self.packages),
            "complete": self.complete, "size_bytes": self.size_bytes,
            "last_used": self.last_used.isoformat(timespec="seconds") if self.last_used else None,
        }


def overlays_root() -> Path:
    return cache_dir("runtime-envs")


def list_overlays() -> list[Overlay]:
    from kernel_builder.environments.store import disk_usage

    root = overlays_root()
    overlays = []
    for path in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        try:
            marker = json.loads((path / READY).read_text())
            last_used = datetime.fromtimestamp((path / READY).stat().st_mtime, timezone.utc)
        except (OSError, ValueError):
            marker, last_used = {}, None
        base = marker.get("base")
        # An overlay whose base is gone (its build environment was pruned) cannot run.
        complete = bool(marker) and base is not None and Path(base).exists()
        overlays.append(Overlay(path.name, path, base, tuple(marker.get("packages", ())), complete,
                                disk_usage(path), last_used))
    return overlays


def prune_overlays(*, all: bool = False, older_than_days: float | None = None, keys: Sequence[str] = ()) -> list[Overlay]:
    """Remove incomplete or orphaned overlays always, plus `keys`, those unused for longer than
    `older_than_days`, or with `all` every one; one being created right now is left alone."""
    root = overlays_root()
    cutoff = None if older_than_days is None else datetime.now(timezone.utc) - timedelta(days=older_than_days)
    removed = []
    for overlay in list_overlays():
        stale = cutoff is not None and overlay.last_used is not None and overlay.last_used < cutoff
        if not (all or not overlay.complete or overlay.key in keys or stale):
            continue
        with exclusive_lock(root / f"{overlay.key}.lock", blocking=False) as held:
            if not held:
                continue
            shutil.rmtree(overlay.path, ignore_errors=True)
            (root / f"{overlay.key}.lock").unlink(missing_ok=True)
        removed.append(overlay)
    return removed


def _pin_to_torch(requirement: str, torch_version: str | None) -> str:
    """A bare `triton` becomes the release the base's torch was made with (matrix.toml
    [triton-for-torch]): pip's newest triton can be too new for that torch."""
    if requirement != "triton" or torch_version is None:
        return requirement
    pinned = triton_for_torch().get(".".join(torch_version.split("+")[0].split(".")[:2]))
    return f"triton=={pinned}" if pinned else requirement


def triton_for_torch() -> dict[str, str]:
    import tomllib
    from importlib import resources

    text = resources.files("kernel_builder").joinpath("data/matrix.toml").read_text()
    return tomllib.loads(text).get("triton-for-torch", {})


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[<>=!~;\[ ]", name, maxsplit=1)[0]).lower()


_BASE_PROBE = """
import json, site, sys, sysconfig
from importlib import metadata
paths = [sysconfig.get_path("purelib"), sysconfig.get_path("platlib")] + [p for p in sys.path if p.endswith("site-packages")]
dists = sorted({(d.metadata["Name"] or "", d.version or "") for d in metadata.distributions()})
try:
    torch = metadata.version("torch")
except metadata.PackageNotFoundError:
    torch = None
print(json.dumps({"executable": sys.executable, "prefix": sys.prefix, "paths": list(dict.fromkeys(paths)), "dists": dists, "torch": torch}))
"""


def _base_info(base_python: str) -> dict:
    try:
        out = subprocess.run([base_python, "-c", _BASE_PROBE], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise RuntimeEnvError(f"cannot run the base interpreter {base_python}: {exc}") from None
    info = json.loads(out)
    info["dists"] = {_normalize(name): version for name, version in info["dists"] if name}
    return info


def _create(env: Path, base: dict, missing: list[str]) -> None:
    # The venv's interpreter is the base's own; the .pth makes the base's site-packages (torch)
    # visible after the venv's own, so what pip installs here wins and torch is never reinstalled.
    subprocess.run([base["executable"], "-m", "venv", "--without-pip", str(env)], capture_output=True, check=True)
    python = env / "bin" / "python"
    site_dir = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    Path(site_dir).mkdir(parents=True, exist_ok=True)
    (Path(site_dir) / "_kbuild_base.pth").write_text("\n".join(base["paths"]) + "\n")
    # kbuild's own pip drives the install into the venv (the base may have no pip).
    command = [sys.executable, "-m", "pip", "--python", str(python), "install",
               "--disable-pip-version-check", "--no-input", *missing]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PIP_NO_INPUT": "1"})
    if result.returncode != 0:
        reason = pip_reason(result.stdout + result.stderr)
        raise RuntimeEnvError(f"could not install {', '.join(missing)} for the kernel's runtime: {reason}")
