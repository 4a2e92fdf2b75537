"""`kbuild test`: run a kernel's own tests (KERNEL_DIR/tests) against its built variant, the
way kernel-builder's `testshell` does: the variant importable under the kernel's python name,
LOCAL_KERNELS pointing at the build for get_kernel-style tests, and the kernel's runtime needs
plus what its tests import installed in a cached test environment (kernel_builder.environments.runtime_overlay).

A test import is installed only when the repo does not provide the module itself (a module or
package at its root or in tests/, which pytest puts on sys.path: from the index, that name
could be anyone's) and a known distribution provides it (kernel_builder.environments.import_names),
and so is an import of the kernel's own package; what will be installed is listed, with the
file that needs it, before pip runs, and an import nothing known provides is named, not installed."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from kernel_builder.backend_facts import DEVICE_WORDS as BACKEND_DEVICE_WORDS
from kernel_builder.errors import KbuildError, UsageError
from kernel_builder.kernel.manifest import Manifest
from kernel_builder.environments.import_names import installed_modules, provider
from kernel_builder.environments.runtime_overlay import (
    RuntimeEnvError, kernel_runtime_needs, missing_requirements, runtime_python,
)
from kernel_builder.runtime.loader import read_metadata
from kernel_builder.runtime.zip_package import ZIP, archive_path, layout_of

# The runtime tests load kernels with (get_kernel): the base environment's own when it has one
# (runtime_python installs only what the base lacks, by name), else the version kbuild's test extra pins.
KERNELS_PIN = "kernels==0.19.1"
# A skip reason naming one of these means the test needs hardware this machine lacks.
# (the backends' own names and torch devices, from backend_facts, and these general words).
DEVICE_WORDS = re.compile(
    r"\b(" + "|".join((*BACKEND_DEVICE_WORDS, r"gpus?", "device", "hip", "npu", "triton")) + r")\b", re.IGNORECASE
)
# A failure with one of these messages is a test that hard-codes a device this machine lacks
# (torch's and triton's own errors), not a fault of the kernel: counted apart as needs_device.
NO_DEVICE_ERRORS = re.compile(
    r"not compiled with (CUDA|XPU|ROCm|HIP|MPS) enabled|Found no NVIDIA driver|No CUDA GPUs are available"
    r"|no ROCm-capable device|CUDA driver initialization failed|0 active drivers|Cannot access accelerator device"
    r"|MPS backend is supported on MacOS|Expected one of cpu.* device type at start of device string",
    re.IGNORECASE,
)
# What `--clean-env` passes to the tests: where things are and which devices to use, never a
# credential (HF_TOKEN, cloud keys, index passwords stay with the caller).
CLEAN_ENV = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TMPDIR", "TZ", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE",
    "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK", "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE",
)
# `get_kernel("org/name"...)`-style literals in the tests: each one is pointed at the build.
REPO_LITERAL = re.compile(r"""get_kernel\(\s*["']([\w.-]+/[\w.-]+)["']""")


@dataclass
class TestRun:
    kernel: str
    variant: str
    python: str
    packages: tuple[str, ...]
    exit_code: int
    counts: dict = field(default_factory=dict)
    skipped: list = field(default_factory=list)  # [{reason, count}]
    failures: list = field(default_factory=list)  # [{test, message}]
    not_installed: list = field(default_factory=list)  # [{package, reason}]: test imports pip could not install
    installs: list = field(default_factory=list)  # [{package, spec, why}]: what the test environment adds to the base

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def to_json(self) -> dict:
        return {
            "kernel": self.kernel, "variant": self.variant, "python": self.python,
            "packages": list(self.packages), "ok": self.ok, "exit_code": self.exit_code,
            "counts": self.counts, "skipped": self.skipped, "failures": self.failures,
            "not_installed": self.not_installed, "installs": self.installs,
        }

    def summary(self) -> str:
        c = self.counts
        line = f"{self.kernel} ({self.variant}): {c['passed']} passed, {c['failed']} failed"
        if c["errors"]:
            line += f", {c['errors']} errors"
        if c["failed_needs_device"]:
            line += f" ({c['failed_needs_device']} of them on a device this machine lacks)"
        line += f", {c['skipped']} skipped"
        if c["needs_device"]:
            line += f" ({c['needs_device']} need a device this machine lacks)"
        return line

    def lines(self) -> list[str]:
        """What `kbuild test` and `kbuild dev` print after pytest's output: the summary, the
        skips by reason, the test imports left out."""
        lines = [self.summary()]
        lines += [f"  skipped {s['count']}: {s['reason']}" for s in self.skipped]
        lines += [f"  not installed (the tests importing it cannot run): {n['reason']}" for n in self.not_installed]
        if self.exit_code == 5:
            lines.append("no tests found in tests/")
        return lines


# -- what the tests need -----------------------------------------------------------------
def repo_modules(kernel_dir: Path, tests_dir: Path) -> set[str]:
    """Module names the kernel repo provides its tests: every module or package at its root
    (pytest runs from there, first on sys.path), in tests/ and the folders below it (pytest puts
    a test's or conftest.py's folder on sys.path), and the folders' own names."""
    folders = [kernel_dir, tests_dir, *(p for p in tests_dir.rglob("*") if p.is_dir())]
    names = {tests_dir.name}
    for folder in folders:
        try:
            names |= {entry.name.split(".")[0] for entry in folder.iterdir()}
        except OSError:
            continue
    return names


def imports_of_tests(kernel_dir: Path, tests_dir: Path, python_name: str) -> dict[str, str]:
    """module -> the first test file (relative to KERNEL_DIR) importing it at top level, for
    the modules neither the standard library, torch, kernels, the kernel itself nor the repo
    provide (relative imports are the repo's too)."""
    skip = set(sys.stdlib_module_names) | {"torch", "kernels", python_name, "__future__"} | repo_modules(kernel_dir, tests_dir)
    found: dict[str, str] = {}
    files = sorted(tests_dir.rglob("*.py")) + [f for f in (kernel_dir / "conftest.py",) if f.is_file()]
    for file in files:
        try:
            tree = ast.parse(file.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError, RecursionError):
            continue  # pytest reports a broken test file itself
        for node in tree.body:
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.split(".")[0] not in skip:
                    found.setdefault(name, str(file.relative_to(kernel_dir)))
    return found


def packages_tests_import(kernel_dir: Path, tests_dir: Path, python_name: str, base_python: str) -> tuple[dict[str, str], list[dict]]:
    """({distribution: why}, [{package, reason}] left out): the distributions providing the
    modules the tests import that base_python lacks, resolved by import_names; a module
    nothing known provides is left out, never guessed."""
    installed = installed_modules(base_python)
    install: dict[str, str] = {}
    left_out: list[dict] = []
    for module, file in imports_of_tests(kernel_dir, tests_dir, python_name).items():
        found = provider(module, installed)
        if found.distribution:
            install.setdefault(found.distribution, f"{file} imports {module}")
        elif not found.present:
            left_out.append({"package": module, "reason": f"{file} imports {module}: {found.reason}"})
    return install, left_out


def local_kernel_ids(manifest: Manifest, tests_dir: Path) -> list[str]:
    """Repo ids that should load this build: kernels-community/<name>, the hub repo-id, and
    any org/name literal the tests pass to get_kernel."""
    ids = [f"kernels-community/{manifest.name}"]
    hub = manifest.general.hub
    if hub is not None and hub.repo_id:
        ids.append(hub.repo_id)
    for file in sorted(tests_dir.rglob("*.py")):
        try:
            ids += REPO_LITERAL.findall(file.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
    return list(dict.fromkeys(ids))


# -- choosing what to test -----------------------------------------------------------------
def tests_folder(kernel_dir: Path) -> Path:
    """KERNEL_DIR/tests, or a one-line error before anything is built."""
    tests_dir = kernel_dir / "tests"
    if not tests_dir.is_dir():
        raise UsageError(f"no tests/ folder in {kernel_dir}: `kbuild test` runs the kernel's own tests from there")
    return tests_dir


def machine_selection(manifest: Manifest) -> str:
    """The --matrix selection of the variants kbuild's runtime could load here: this machine's
    backend, running torch and platform (so `kbuild test` does not build, say, CUDA variants on a
    GPU-less machine that has nvcc, nor cross-build aarch64 ones on x86_64: that downloads 3 GB).
    A kernel without that backend is a one-line error naming the devices its tests need."""
    from kernel_builder.runtime.system import detect_system

    system = detect_system()
    if system.backend not in manifest.general.backends:
        raise UsageError(
            f"{manifest.name} has no {system.backend} backend (it has {', '.join(manifest.general.backends)}): "
            f"its tests need one of those devices, and this machine's is {system.backend}"
        )
    torch = f" torch={system.torch[0]}.{system.torch[1]}" if system.torch else ""
    return f"backend={system.backend}{torch} arch={system.arch} os={system.os}"


def choose_variant(kernel_dir: Path, variant: str | None, build_dir: Path | None = None) -> Path:
    """The built variant folder to test: `variant` under `build_dir` (default KERNEL_DIR/build),
    else the one the runtime would load on this machine."""
    from kernel_builder.runtime.loader import find_variant

    build_dir = build_dir or kernel_dir / "build"
    if variant is not None:
        folder = build_dir / variant
        if not (folder / "metadata.json").is_file():
            raise UsageError(f"variant {variant} is not built in {build_dir} and could not be built here")
        return folder
    try:
        return find_variant(build_dir)
    except Exception as e:  # the loader's one-line KernelLoadError
        raise KbuildError(f"no built variant of {kernel_dir} loads on this machine: {e}") from None


def variant_python(variant_name: str) -> str:
    """The interpreter of the environment that built (and so can load) `variant_name`: for a
    variant of another architecture, its emulated Python (made on first need)."""
    from kernel_builder.environments.choice import EnvChooser
    from kernel_builder.environments.cross_env import runnable_python
    from kernel_builder.variants import Variant

    chooser = EnvChooser.from_options()
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731 - what is downloaded, once
    return str(runnable_python(chooser.env_for(Variant.parse(variant_name)), say))


# A zip-layout variant's package is <variant>/<id>.zip (kernel_builder.runtime.zip_package): the
# package under the python name runs the archive's __init__.py with the __path__ the runtime
# gives it, so its submodules (`_ops`, `layers`) come from the archive and the library from beside it.
_ZIP_SHIM = """\
# Generated by kbuild test: `{python_name}` is the package in {archive}.
import zipimport as _zipimport

__path__[:] = [{folder!r}, {archive!r}]
__file__ = {init!r}
exec(_zipimport.zipimporter({archive!r}).get_code("__init__"))
del _zipimport
"""


def import_shim(variant_dir: Path, metadata: dict, python_name: str, into: Path) -> Path:
    """A folder for PYTHONPATH holding `<python_name>`: the variant folder itself (a link, so
    the package and its relative imports resolve to exactly the built files), or for a zip
    variant a package that imports its archive."""
    if layout_of(metadata) != ZIP:
        (into / python_name).symlink_to(variant_dir.resolve(), target_is_directory=True)
        return into
    folder = variant_dir.resolve()
    archive = archive_path(folder, metadata["id"])
    (into / python_name).mkdir()
    (into / python_name / "__init__.py").write_text(_ZIP_SHIM.format(
        python_name=python_name, folder=str(folder), archive=str(archive), init=str(archive / "__init__.py"),
    ))
    return into


# -- running pytest and reading its results ------------------------------------------------
def read_junit(xml_file: Path) -> tuple[dict, list, list]:
    """(counts, skipped grouped by reason, failures) from pytest's junit XML."""
    counts = dict(passed=0, failed=0, errors=0, skipped=0, needs_device=0, failed_needs_device=0)
    reasons: Counter = Counter()
    failures = []
    if not xml_file.is_file():
        return counts, [], failures
    for case in ET.parse(xml_file).getroot().iter("testcase"):
        test = f"{case.get('classname', '')}::{case.get('name', '')}".lstrip(":")
        outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            counts["passed"] += 1
        elif outcome.tag == "skipped":
            reason = (outcome.get("message") or "").strip()
            counts["skipped"] += 1
            reasons[reason] += 1
            if DEVICE_WORDS.search(reason):
                counts["needs_device"] += 1
        else:
            counts["failed" if outcome.tag == "failure" else "errors"] += 1
            message = (outcome.get("message") or "").strip()
            no_device = bool(NO_DEVICE_ERRORS.search(f"{message}\n{outcome.text or ''}"))
            counts["failed_needs_device"] += no_device
            failures.append({"test": test, "message": message, "needs_device": no_device})
    skipped = [{"reason": r, "count": n} for r, n in reasons.most_common()]
    return counts, skipped, failures


def run_kernel_tests(
    kernel_dir: Path,
    manifest: Manifest,
    variant_dir: Path,
    pytest_args: Sequence[str] = (),
    *,
    base_python: str,
    capture: bool = False,
    clean_env: bool = False,
    announce: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> TestRun:
    """Run KERNEL_DIR/tests against `variant_dir` (a folder of some build/) in a test
    environment layered on `base_python` (the variant's build environment). pytest's output
    streams through unless `capture` (then it goes to stderr, keeping stdout for --json).
    `announce` gets one line per package the test environment installs, before pip runs. The
    tests get the caller's environment (tokens included), or with `clean_env` only CLEAN_ENV."""
    kernel_dir = kernel_dir.resolve()
    tests_dir = tests_folder(kernel_dir)
    variant = variant_dir.name
    # Bounded, like the loader's own read: a planted FIFO, /dev/zero link or deep JSON is one line.
    metadata = read_metadata(variant_dir)
    backend = metadata.get("backend", {})
    backend = backend.get("type", "cpu") if isinstance(backend, dict) else str(backend)
    needs = kernel_runtime_needs(manifest, backend)
    required = {**dict(needs.why), "pytest": "kbuild test runs pytest", KERNELS_PIN: "the tests' get_kernel loads the build"}
    extras, unresolved = packages_tests_import(kernel_dir, tests_dir, manifest.python_name, base_python)
    # The kernel's own imports that nothing known provides: named, never installed by name.
    unresolved += [{"package": module, "reason": why} for module, why in needs.unmet_imports(base_python)]
    installs = planned_installs(base_python, {**extras, **required})
    for item in installs:
        announce(f"test environment installs {item['spec']}: {item['why']}")
    python, packages, not_installed = test_environment(base_python, list(required), [e for e in extras if e not in required])
    not_installed = unresolved + not_installed

    with tempfile.TemporaryDirectory(prefix="kbuild-test-") as tmp:
        (Path(tmp) / "shim").mkdir()
        shim = import_shim(variant_dir, metadata, manifest.python_name, Path(tmp) / "shim")
        junit = Path(tmp) / "junit.xml"
        env = {k: v for k, v in os.environ.items() if k in CLEAN_ENV} if clean_env else dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(shim), env.get("PYTHONPATH", "")) if p)
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # the runtime re-hashes variants: no __pycache__ in them
        # kernels reads LOCAL_KERNELS' paths as repos holding build/<variant>: the variant's build/ is in that one.
        repo = Path(os.path.abspath(variant_dir)).parent.parent
        env["LOCAL_KERNELS"] = ":".join(f"{rid}={repo}" for rid in local_kernel_ids(manifest, tests_dir))
        command = [python, "-m", "pytest", str(tests_dir), "-p", "no:cacheprovider", f"--junitxml={junit}", *pytest_args]
        code = subprocess.run(command, cwd=kernel_dir, env=env, stdout=sys.stderr if capture else None).returncode
        counts, skipped, failures = read_junit(junit)
    return TestRun(manifest.name, variant, python, packages, code, counts, skipped, failures, not_installed, installs)


def planned_installs(base_python: str, wanted: dict[str, str]) -> list[dict]:
    """[{package, spec, why}] for each of `wanted` (package -> why) base_python lacks: what
    the test environment will pip-install on top of it."""
    missing = missing_requirements(base_python, list(wanted))
    return [{"package": p, "spec": spec, "why": wanted[p]} for p, spec in missing.items()]


def test_environment(base_python: str, required: Sequence[str], extras: Sequence[str]):
    """(interpreter, packages installed, [{package, reason}] left out): the kernel's needs,
    pytest and kernels must install (RuntimeEnvError otherwise); a test import pip cannot
    install here (say flash_attn, compiled from source) is left out, so only the test files
    that import it fail to collect instead of the whole run."""
    wanted = list(dict.fromkeys([*required, *extras]))
    try:
        return runtime_python(base_python, wanted), tuple(wanted), []
    except RuntimeEnvError:
        pass
    kept: list[str] = list(dict.fromkeys(required))
    runtime_python(base_python, kept)  # the needs alone: their error is the run's
    left_out = []
    for extra in extras:  # one at a time, to find which ones pip cannot install
        if extra in kept:
            continue
        try:
            runtime_python(base_python, [*kept, extra])
            kept.append(extra)
        except RuntimeEnvError as e:
            left_out.append({"package": extra, "reason": e.message})
    return runtime_python(base_python, kept), tuple(kept), left_out

