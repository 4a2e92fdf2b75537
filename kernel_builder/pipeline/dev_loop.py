"""`kbuild dev`: a kernel author's edit -> build -> test loop.

A round builds this machine's variant (the one `kbuild test` tests: build_then_test) into a
development folder of kbuild's cache, keyed by the kernel's path (`dev_build_dir`), never
KERNEL_DIR/build, which `kbuild publish` uploads, in a CMake work tree of its own, so
switching between `kbuild build` and `kbuild dev` recompiles neither. Its op namespace is
fixed (DEV_OPS_ID), so an edit recompiles only the files it touches, and a CUDA variant
compiles one architecture (kernel_builder.compile.backends.cuda_arch). Then the kernel's tests run
against that build. A failed compile is reported by its first compiler error (file:line,
the source line and the caret), not a log tail.

`watch` runs a round again on every save of a file the build reads (sources.input_files)
or of the kernel's tests/, until it is stopped."""

from __future__ import annotations

import queue
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from kernel_builder.pipeline.build_then_test import build_for_tests, failed_jobs, run_tests_on_build
from kernel_builder.checks.kernel_tests import TestRun, machine_selection, tests_folder
from kernel_builder.compile.backends.cuda_arch import ArchChoice, dev_cuda_arch
from kernel_builder.compile.diagnostics import first_error_excerpt
from kernel_builder.errors import Interrupted, KbuildError
from kernel_builder.kernel.manifest import Manifest, load_manifest
from kernel_builder.kernel.sources import input_files
from kernel_builder.paths import cache_dir, short_key

# The op namespace of every dev build (`_<name>_<backend>_dev`): a hash of the sources there
# would move at each edit and recompile the files that register ops (the binding, with torch's
# headers: seconds) beside the edited one (kernel.registration). Dev builds are never
# published, and each test run is a fresh interpreter, so one name never meets another.
DEV_OPS_ID = "dev"
# pytest's own progress, quieter: the round ends with kbuild's summary line anyway.
DEFAULT_PYTEST_ARGS = ("-q",)
# watchfiles groups the events of one save (editors write, rename, touch) into one batch:
# it yields once nothing changed for STEP_MS, and at the latest after DEBOUNCE_MS.
DEBOUNCE_MS, STEP_MS = 1600, 50


def dev_build_dir(manifest: Manifest) -> Path:
    """The development builds' build/ folder for this kernel, in kbuild's cache. Its parent
    stands in for the kernel repo while the tests run (stand_in_repo), and in LOCAL_KERNELS,
    as kernels reads <repo>/build/<variant>."""
    return cache_dir("dev", short_key(str(manifest.root.resolve()))) / "build"


@dataclass(frozen=True)
class DevSetup:
    """What every round shares, resolved once: the kernel, its dev build folder, the CUDA
    architectures (None for another backend) and the pytest arguments."""

    kernel_dir: Path
    manifest: Manifest
    build_dir: Path
    cuda_arch: ArchChoice | None
    pytest_args: tuple[str, ...]


def prepare(kernel_dir: Path, cuda_arch: tuple[str, ...] = (), pytest_args: Sequence[str] = ()) -> DevSetup:
    """A one-line error, before anything is built, for a kernel without tests/ or without
    this machine's backend, or for an architecture nvcc cannot compile."""
    from kernel_builder.runtime.system import detect_system

    tests_folder(kernel_dir)
    manifest = load_manifest(kernel_dir)
    machine_selection(manifest)
    arch = dev_cuda_arch(manifest, cuda_arch, sys.executable) if detect_system().backend == "cuda" else None
    args = (*DEFAULT_PYTEST_ARGS, *pytest_args)
    return DevSetup(kernel_dir, manifest, dev_build_dir(manifest), arch, args)


@dataclass
class DevRound:
    """One build and test: `error` holds the first compiler error (or the one line that
    stopped the round), `tests` the test run when the build succeeded."""

    kernel: str
    variant: str | None
    seconds: float
    build: str  # built | up-to-date | failed | error
    build_seconds: float = 0.0
    log: str | None = None
    error: list[str] = field(default_factory=list)
    tests: TestRun | None = None
    error_exit: int = 1  # the exit code of the KbuildError that stopped a round

    @property
    def exit_code(self) -> int:
        return self.tests.exit_code if self.tests is not None else self.error_exit

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def lines(self) -> list[str]:
        """What a round prints after pytest's own output: the test summary, or the failure."""
        if self.tests is not None:
            return [*self.tests.lines(), f"({self.build} in {self.build_seconds:.1f} s, round {self.seconds:.1f} s)"]
        if self.build == "failed":
            log = f"; log: {self.log}" if self.log else ""
            head = f"{self.kernel} ({self.variant}): compile failed in {self.build_seconds:.1f} s{log}"
            return [head, *self.error]
        return [f"{self.kernel}: {' '.join(self.error)}"]

    def to_json(self) -> dict:
        return {
            "kernel": self.kernel, "variant": self.variant, "ok": self.ok, "exit_code": self.exit_code,
            "seconds": round(self.seconds, 3), "build": {"status": self.build, "seconds": round(self.build_seconds, 3),
                                                          "log": self.log, "error": self.error},
            "tests": self.tests.to_json() if self.tests is not None else None,
        }


def run_round(setup: DevSetup, *, capture: bool = False, on_wait: Callable[[str], None] = lambda m: None) -> DevRound:
    """Build, then test (see the module doc). A KbuildError of the round (a build.toml
    broken by the edit, say) is the round's result, so a watch goes on."""
    started = time.perf_counter()
    name = setup.manifest.name
    try:
        manifest, report = build_for_tests(
            setup.kernel_dir, out=setup.build_dir, on_wait=on_wait, ops_id=DEV_OPS_ID,
            cuda_arch=setup.cuda_arch.archs if setup.cuda_arch else (),
        )
        jobs = [r for r in report.results if r.status != "skipped"]
        if not jobs:
            reasons = "; ".join(r.detail for r in report.results) or "nothing selected"
            raise KbuildError(f"this machine's variant was not built: {reasons}")
        job = jobs[0]
        failed = failed_jobs(report)
        if failed:
            job = failed[0]
            excerpt = first_error_excerpt(_read(job.log), setup.kernel_dir) or [job.detail]
            return DevRound(name, job.label, time.perf_counter() - started, "failed", job.seconds, job.log, excerpt)
        repo = stand_in_repo(setup)
        tests = run_tests_on_build(repo, manifest, build_dir=repo / "build", pytest_args=setup.pytest_args, capture=capture)
    except KbuildError as e:
        if getattr(e, "signal_number", None):  # Ctrl-C during the build ends the loop, not the round
            raise
        return DevRound(name, None, time.perf_counter() - started, "error", error=[e.message], error_exit=e.exit_code)
    return DevRound(name, job.label, time.perf_counter() - started, job.status, job.seconds, job.log, tests=tests)


def stand_in_repo(setup: DevSetup) -> Path:
    """The folder the tests run in: the dev build's build/, a fresh copy of tests/, and a link
    to every other entry of the kernel repo. Tests find a kernel's build from their own file
    (`Path(__file__).resolve().parents[1] / "build"`, as examples/ and `kbuild init` write
    them), and resolve() sees through a link, so tests/ is a copy."""
    repo = setup.build_dir.parent
    for entry in repo.iterdir():
        if entry.name == "build":
            continue
        if entry.is_symlink() or not entry.is_dir():
            entry.unlink()
        else:
            shutil.rmtree(entry)
    for entry in setup.kernel_dir.resolve().iterdir():
        if entry.name == "tests":
            shutil.copytree(entry, repo / "tests", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        elif entry.name != "build":
            (repo / entry.name).symlink_to(entry)
    return repo


def _read(log: str | None) -> str:
    try:
        return Path(log).read_text(errors="replace") if log else ""
    except OSError:
        return ""


def watched_files(setup: DevSetup) -> set[Path]:
    """What a save of starts a new round: every file the build reads, and the tests."""
    try:
        files = set(input_files(load_manifest(setup.kernel_dir)))
    except KbuildError:  # a broken build.toml: its fix is a save of build.toml itself
        files = {setup.manifest.path}
    return {f.resolve() for f in files}


def is_watched(path: Path, files: set[Path], tests_dir: Path) -> bool:
    path = path.resolve()
    return path in files or (path.is_relative_to(tests_dir) and "__pycache__" not in path.parts)


def watch(
    setup: DevSetup,
    one_round: Callable[[], object],
    *,
    stop: threading.Event | None = None,
    max_runs: int | None = None,
    changes: Iterable[set[tuple[object, str]]] | None = None,
    on_change: Callable[[list[Path]], None] = lambda paths: None,
) -> int:
    """Run `one_round` now and again after saves of watched files, until `stop` is set,
    `max_runs` rounds have run or `changes` ends; the number of rounds run. `changes`
    (default: watchfiles on the kernel folder) yields batches of (change, path). It is read
    from the start, in a thread: a save during a round starts the next one, and all the
    saves made during one round start one round, not one each. Ctrl-C ends the watch with
    Interrupted("dev: stopped")."""
    import watchfiles

    tests_dir = (setup.kernel_dir / "tests").resolve()
    stop = stop or threading.Event()
    if changes is None:
        # The folder, not the files: editors save by writing a new file and renaming it over
        # the old one, which a watch on the old file's inode misses.
        changes = watchfiles.watch(setup.kernel_dir, stop_event=stop, debounce=DEBOUNCE_MS, step=STEP_MS)
    pending: queue.Queue = queue.Queue()

    def feed() -> None:
        try:
            for batch in changes:
                pending.put(batch)
        except BaseException as e:  # re-raised where the rounds run
            pending.put(e)
        pending.put(None)

    threading.Thread(target=feed, name="kbuild-dev-watch", daemon=True).start()
    try:
        one_round()
        runs = 1
        files = watched_files(setup)
        while not stop.is_set() and (max_runs is None or runs < max_runs):
            try:
                batches = [pending.get(timeout=0.2)]
            except queue.Empty:
                continue
            while not pending.empty():
                batches.append(pending.get_nowait())
            ended = None in batches
            for item in batches:
                if isinstance(item, BaseException):
                    raise item
            saved = sorted({Path(p) for b in batches if b for _, p in b if is_watched(Path(p), files, tests_dir)})
            if saved:
                on_change(saved)
                one_round()
                runs += 1
                files = watched_files(setup)  # build.toml may now list other sources
            if ended:
                break
        return runs
    except KeyboardInterrupt:
        raise Interrupted("dev: stopped") from None
    finally:
        stop.set()  # ends watchfiles' watch, and so the thread
