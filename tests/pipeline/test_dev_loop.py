"""`kbuild dev`'s watch (kernel_builder.pipeline.dev_loop.watch): which saves start a round, and
that a real save is seen, with a fake round (no compile) and a bounded number of rounds."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from conftest import copy_example
from kernel_builder.pipeline.dev_loop import DevSetup, dev_build_dir, watch
from kernel_builder.kernel.manifest import load_manifest


@pytest.fixture
def setup(tmp_path) -> DevSetup:
    root = copy_example("relu", tmp_path)
    manifest = load_manifest(root)
    return DevSetup(root, manifest, dev_build_dir(manifest), None, ())


def _saves(root: Path, *names: str) -> set:
    return {(2, str(root / name)) for name in names}  # (watchfiles.Change.modified, path)


def test_only_a_save_of_what_the_build_reads_or_of_the_tests_starts_a_round(setup):
    root = setup.kernel_dir
    batches = [
        _saves(root, "README.md"), _saves(root, "build/torch213-cxx11-cpu-x86_64-linux/metadata.json"),
        _saves(root, "relu_cpu/relu_cpu.cpp"), _saves(root, "tests/__pycache__/x.pyc"),
        _saves(root, "tests/test_relu.py", "README.md"), _saves(root, "build.toml"),
    ]
    round_done = threading.Event()

    def one_at_a_time():
        for batch in batches:
            round_done.wait(10)  # the next save comes once a round ran (or the unwatched one was passed over)
            round_done.clear()
            yield batch
            if not any(p.endswith((".cpp", ".py", ".toml")) and "__pycache__" not in p for _, p in batch):
                round_done.set()

    rounds, seen = [], []
    runs = watch(setup, lambda: (rounds.append(1), round_done.set()), changes=one_at_a_time(), on_change=seen.append)
    assert runs == len(rounds) == 4  # the first round, then the three watched saves
    assert [[p.name for p in paths] for paths in seen] == [["relu_cpu.cpp"], ["test_relu.py"], ["build.toml"]]


def test_saves_during_a_round_start_one_round_and_max_runs_bounds_the_rounds(setup):
    batches = [_saves(setup.kernel_dir, "relu_cpu/relu_cpu.cpp"), _saves(setup.kernel_dir, "tests/test_relu.py")]
    release = threading.Event()

    def later():
        release.wait(10)
        yield from batches * 3

    rounds, seen = [], []

    def one_round():
        rounds.append(1)
        release.set()
        time.sleep(0.3)  # every save arrives while the round runs

    assert watch(setup, one_round, changes=later(), max_runs=5, on_change=seen.append) == 2 == len(rounds)
    assert [[p.name for p in paths] for paths in seen] == [["relu_cpu.cpp", "test_relu.py"]]
    rounds.clear()
    assert watch(setup, lambda: rounds.append(1), changes=iter([batches[0]] * 5), max_runs=1) == 1 == len(rounds)


def test_a_real_save_is_picked_up_and_rerun(setup):
    """watchfiles on the kernel folder: a save after the first round starts the second. The
    stop event bounds the test if no event ever comes."""
    source = setup.kernel_dir / "relu_cpu" / "relu_cpu.cpp"
    first_done = threading.Event()
    stop = threading.Event()
    rounds = []

    def one_round():
        rounds.append(source.read_text().count("// saved"))
        first_done.set()

    def save():
        first_done.wait(30)
        # watchfiles' watcher starts after the first round: save until the second round runs.
        for _ in range(20):
            if len(rounds) > 1 or stop.wait(0.5):
                return
            source.write_text(source.read_text() + "// saved\n")

    writer = threading.Thread(target=save)
    writer.start()
    timer = threading.Timer(60, stop.set)
    timer.start()
    try:
        runs = watch(setup, one_round, stop=stop, max_runs=2)
    finally:
        stop.set()
        timer.cancel()
        writer.join()
    assert runs == 2 and rounds[0] == 0 and rounds[1] >= 1
