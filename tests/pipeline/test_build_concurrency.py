"""`kbuild build` against itself and against SIGKILL, on the tiny CPU kernel.

Two builds at once: one waits for the other's lock, then finds the variant up to date.
A build killed mid-compile leaves the previous variant intact, and the next run succeeds."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, kbuild
from kernel_builder.runtime.digest import verify_digest
from kernel_builder.assemble.stamp import STAGING_PREFIX, remove_stale_staging
from test_build import FIXTURE, VARIANT

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="watches the compiler through /proc")

NO_CACHE = "--no-compiler-cache"  # every edit below must really compile


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tiny-concurrency") / "tiny"
    shutil.copytree(FIXTURE, root)
    kbuild("build", str(root), NO_CACHE, check=True)
    return root


def edit_source(root: Path, addend: str) -> None:
    """Make add_one add `addend` instead of the flag: a change that must recompile."""
    source = root / "cpu" / "add.cpp"
    text = source.read_text()
    start = text.index("out.copy_(x + ") + len("out.copy_(x + ")
    source.write_text(text[:start] + addend + text[text.index(");", start):])


def start_build(root: Path) -> subprocess.Popen:
    """`kbuild build` in its own process group, so that the test can kill all of it."""
    return subprocess.Popen(
        [sys.executable, "-m", "kernel_builder.cli", "build", str(root), NO_CACHE],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


class BuildProcesses:
    """Every process of one `kbuild build`, by session: kbuild's own (start_build gives it
    one) and each tool's (CMake runs in a session of its own so that an interrupt stops it
    whole; Ninja gives each compile its own process group in it). A tool's session is found
    while kbuild is the tool's parent, and keeps its id once kbuild is killed."""

    def __init__(self, build: subprocess.Popen):
        self.pid = build.pid
        self.sessions = {build.pid}

    def running(self) -> dict[int, str]:
        """pid -> command name of every live process of the build."""
        table = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                text = stat.read_text()
            except OSError:
                continue  # exited meanwhile
            fields = text[text.rindex(")") + 2 :].split()  # state, ppid, pgrp, session, ...
            table[int(stat.parent.name)] = (fields[0], int(fields[1]), int(fields[3]), text[text.index("(") + 1 : text.rindex(")")])
        self.sessions |= {session for _, ppid, session, _ in table.values() if ppid == self.pid}
        # A zombie has exited (its files and locks are closed); an orphan's new parent may be slow to reap it.
        return {pid: name for pid, (state, _, session, name) in table.items() if session in self.sessions and state != "Z"}

    def compiling(self, source: str) -> bool:
        """Whether a compiler of the build is compiling `source` (a file name): not CMake's
        configure-time checks, whose compilers exit in milliseconds."""
        for pid, name in self.running().items():
            if name != "cc1plus":
                continue
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue  # exited meanwhile
            if any(arg.decode(errors="replace").endswith(source) for arg in argv):
                return True
        return False

    def kill(self) -> None:
        """SIGKILL every process of the build at once, compilers included."""
        for pid in self.running():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def loaded_add_one(root: Path) -> str:
    """add_one(zeros(2)) of the built kernel, loaded by the kernels package in a fresh process."""
    loads = subprocess.run(
        [sys.executable, "-c", "import kernels, torch; m = kernels.get_local_kernel(__import__('pathlib').Path("
         f"{str(root)!r}), backend='cpu'); print(m.add_one(torch.zeros(2)).tolist())"],
        capture_output=True, text=True, check=True,
    )
    return loads.stdout.strip()


def assert_one_complete_variant(root: Path) -> dict:
    """build/ holds exactly the variant, whole: its digests hold; no staging beside it."""
    out = root / "build"
    assert [p.name for p in out.iterdir()] == [VARIANT]
    metadata = json.loads((out / VARIANT / "metadata.json").read_text())
    assert verify_digest(out / VARIANT, metadata) == []
    return metadata


@pytest.mark.e2e
def test_two_builds_at_once_one_waits_then_finds_it_up_to_date(tiny):
    edit_source(tiny, "10")
    first, second = start_build(tiny), start_build(tiny)
    outputs = [p.communicate(timeout=600) for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0], outputs
    # The wait is said on stderr, each build's report on stdout.
    waited = [(out, err) for out, err in outputs if "waiting for another kbuild build of" in err]
    assert len(waited) == 1, outputs
    [(report, said)] = waited
    assert said.count("waiting for another kbuild build") == 1  # said once
    assert "(pid " in said and "up-to-date" in report
    assert sum("built " in out for out, _ in outputs) == 1, outputs
    assert_one_complete_variant(tiny)


@pytest.mark.e2e
def test_sigkill_mid_compile_keeps_the_previous_variant_and_the_next_build_succeeds(tiny):
    kbuild("build", str(tiny), NO_CACHE, check=True)
    folder = tiny / "build" / VARIANT
    before = assert_one_complete_variant(tiny)
    library = folder / f"{before['id']}.abi3.so"
    library_bytes = library.read_bytes()

    edit_source(tiny, "20")
    build = start_build(tiny)
    processes = BuildProcesses(build)
    deadline = time.monotonic() + 300
    while not processes.compiling("add.cpp"):
        assert build.poll() is None, build.communicate()
        assert time.monotonic() < deadline, "the compiler never started on add.cpp"
        time.sleep(0.02)
    processes.kill()
    build.communicate()
    while processes.running():  # orphans reparented before the kill reached them
        processes.kill()
        time.sleep(0.05)
    assert build.returncode == -signal.SIGKILL

    assert assert_one_complete_variant(tiny) == before
    assert library.read_bytes() == library_bytes

    # The killed run's locks died with it: the next build neither waits nor fails.
    result = kbuild("build", str(tiny), NO_CACHE, check=True)
    assert "waiting" not in result.stderr and "built " in result.stdout
    after = assert_one_complete_variant(tiny)
    assert after["kbuild"]["input-hash"] != before["kbuild"]["input-hash"]
    assert loaded_add_one(tiny) == "[20.0, 20.0]"


def test_a_variant_killed_between_installs_two_renames_is_put_back(tmp_path):
    replaced = tmp_path / f"{STAGING_PREFIX}old-{VARIANT}-123"
    replaced.mkdir()
    (replaced / "metadata.json").write_text("{}")
    (tmp_path / f"{STAGING_PREFIX}{VARIANT}-123").mkdir()  # the new one, never renamed into place
    (tmp_path / "other").mkdir()
    (tmp_path / f"{STAGING_PREFIX}old-other-456").mkdir()  # its variant is there: a leftover
    remove_stale_staging(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([VARIANT, "other"])
    assert (tmp_path / VARIANT / "metadata.json").read_text() == "{}"


@pytest.mark.e2e
def test_compilers_left_running_by_a_killed_build_hold_its_locks(tiny):
    """SIGKILL reaches kbuild only (as when a CI runner kills the step's main process):
    the compilers it started run on, holding its locks, so the next build waits for them
    instead of compiling into the same work tree at the same time."""
    kbuild("build", str(tiny), NO_CACHE, check=True)
    edit_source(tiny, "30")
    build = start_build(tiny)
    processes = BuildProcesses(build)
    deadline = time.monotonic() + 300
    while not processes.compiling("add.cpp"):
        assert build.poll() is None, build.communicate()
        assert time.monotonic() < deadline, "the compiler never started on add.cpp"
        time.sleep(0.02)
    os.kill(build.pid, signal.SIGKILL)  # kbuild alone; cmake, ninja and the compiler live on
    build.communicate()
    assert processes.compiling("add.cpp")

    result = kbuild("build", str(tiny), NO_CACHE, check=True)
    assert "waiting for another kbuild build" in result.stderr
    assert not processes.running(), "the next build ran while the orphans were still compiling"
    assert_one_complete_variant(tiny)
    assert loaded_add_one(tiny) == "[30.0, 30.0]"
