"""What kbuild ships and where it finds it, from a checkout (as the tests and CI run it)."""

from __future__ import annotations

import subprocess

from kernel_builder.kernel.provenance import kbuild_git_state
from kernel_builder.paths import CHECKOUT_DIR, docker_dir, templates_dir


def test_shipped_folders_are_found():
    assert (templates_dir("build") / "CMakeLists.txt.j2").is_file()
    assert docker_dir("Dockerfile.cpu").is_file()


def test_kbuild_records_its_own_commit_when_run_from_a_checkout():
    head = subprocess.run(["git", "-C", str(CHECKOUT_DIR), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    state = kbuild_git_state()
    assert state is not None and state.commit == head.stdout.strip()
