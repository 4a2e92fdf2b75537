"""The op namespace id (kernel.identity) and the dirty flag (kernel.provenance) with real git:
what the build reads decides them, nothing else in the repo does."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from git_repo import git, new_repo
from kernel_builder.kernel.identity import kernel_identity
from kernel_builder.kernel.manifest import load_manifest
from kernel_builder.scaffold.new_kernel import scaffold



def identity(root: Path):
    return kernel_identity(load_manifest(root))


@pytest.fixture
def kernel(tmp_path) -> Path:
    """The `kbuild init` CPU scaffold, committed (build/ ignored by its .gitignore)."""
    root = tmp_path / "my-op"
    scaffold(root, "my-op", ["cpu"])
    new_repo(root, "scaffold")
    return root


def test_files_the_build_does_not_read_leave_the_id_and_the_dirty_flag_alone(kernel):
    first, state = identity(kernel)
    assert len(first) == 7 and int(first, 16) >= 0 and state is not None and not state.dirty
    (kernel / "README.md").write_text("more words\n")
    (kernel / "tests" / "test_extra.py").write_text("def test_x(): pass\n")
    (kernel / "benchmarks" / "benchmark.py").write_text("print(1)\n")  # the scaffold's own, edited
    (kernel / "benchmarks" / "bench.py").write_text("print(1)\n")
    (kernel / ".gitignore").write_text("build/\n*.log\n")
    (kernel / "build").mkdir()
    (kernel / "build" / "junk.txt").write_text("output\n")
    uncommitted, state = identity(kernel)
    assert (uncommitted, state.dirty) == (first, False)
    git(kernel, "add", "-A")
    git(kernel, "commit", "-q", "-m", "docs")
    committed, state = identity(kernel)
    assert (committed, state.dirty) == (first, False)
    assert state.commit == git(kernel, "rev-parse", "HEAD")  # provenance still records HEAD


def test_a_source_change_changes_the_id_and_is_dirty_until_committed(kernel):
    first, _ = identity(kernel)
    source = kernel / "my_op_cpu" / "scale_add.cpp"
    source.write_text(source.read_text() + "// changed\n")
    edited, state = identity(kernel)
    assert edited.endswith("_dirty") and state.dirty and edited[:7] != first
    git(kernel, "commit", "-q", "-am", "edit")
    committed, state = identity(kernel)
    assert committed == edited[:7] and not state.dirty


@pytest.mark.parametrize("rel", ["build.toml", "torch-ext/my_op/layers.py", "torch-ext/torch_binding.h"])
def test_every_kind_of_input_counts(kernel, rel):
    first, _ = identity(kernel)
    path = kernel / rel
    path.write_text(path.read_text() + "\n# edit\n")
    changed, state = identity(kernel)
    assert changed != first and changed.endswith("_dirty") and state.dirty


def test_an_untracked_or_ignored_input_is_dirty(kernel):
    extra = kernel / "torch-ext" / "my_op" / "helpers.py"  # the package is copied whole: an input
    extra.write_text("X = 1\n")
    assert identity(kernel)[0].endswith("_dirty")
    (kernel / ".gitignore").write_text((kernel / ".gitignore").read_text() + "helpers.py\n")
    git(kernel, "commit", "-q", "-am", "ignore it")
    assert identity(kernel)[0].endswith("_dirty"), "an ignored file the build reads is still not committed"


def test_copies_in_other_folders_agree_with_and_without_git(kernel, tmp_path):
    clone = tmp_path / "elsewhere" / "clone"
    subprocess.run(["git", "clone", "-q", str(kernel), str(clone)], check=True, capture_output=True)
    plain = tmp_path / "plain" / "my-op"
    shutil.copytree(kernel, plain, ignore=shutil.ignore_patterns(".git"))
    (plain / "README.md").write_text("a copy with its own README\n")
    ids = {identity(root)[0] for root in (kernel, clone, plain)}
    assert len(ids) == 1
    assert identity(plain)[1] is None  # no git: no commit to record, so no suffix either


def test_a_kernel_inside_a_bigger_repo_and_a_linked_include_folder(tmp_path):
    top = tmp_path / "mono"
    root = top / "kernels" / "my-op"
    scaffold(root, "my-op", ["cpu"])
    (top / "shared").mkdir()
    (root / "vendor").mkdir()
    (root / "vendor" / "util.h").write_text("#pragma once\n")
    (root / "inc").symlink_to("vendor")  # read through the link: compared at the real file
    build_toml = root / "build.toml"
    build_toml.write_text(build_toml.read_text().replace('[kernel.my_op_cpu]', '[kernel.my_op_cpu]\ninclude = ["inc"]', 1))
    (top / "shared" / "notes.md").write_text("not the kernel's\n")
    new_repo(top, "all")
    first, state = identity(root)
    assert not state.dirty
    (top / "shared" / "notes.md").write_text("changed\n")
    assert identity(root) == (first, state)
    (root / "vendor" / "util.h").write_text("#pragma once\n// edit\n")
    assert identity(root)[0].endswith("_dirty")


def test_a_submodule_input_is_clean_until_its_checkout_changes(kernel, tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "lib.h").write_text("#pragma once\n")
    new_repo(lib, "lib")
    git(kernel, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "third_party/lib")
    build_toml = kernel / "build.toml"
    build_toml.write_text(build_toml.read_text().replace("[kernel.my_op_cpu]", '[kernel.my_op_cpu]\ninclude = ["third_party/lib"]', 1))
    git(kernel, "commit", "-q", "-am", "vendor lib")
    first, state = identity(kernel)
    assert not state.dirty
    (kernel / "third_party" / "lib" / "lib.h").write_text("#pragma once\n// edit\n")
    edited, state = identity(kernel)
    assert state.dirty and edited != first
