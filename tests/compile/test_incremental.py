"""The author's loop, end to end: an edit recompiles the edited unit and the files that
register ops, a commit only the latter, and every result still loads beside the others.

Builds run without a compiler cache: the `compiled` list of `kbuild build --json` is what
Ninja ran, so the counts are the compiles themselves."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import copy_example, kbuild, run_example_tests, optional_module
from git_repo import git, new_repo
from cuda_toolkit import needs_nvcc

torch = optional_module("torch")

CPU_VARIANT = "torch{}{}-cxx11-cpu-x86_64-linux".format(*torch.__version__.split(".")[:2])
CU130_VARIANT = "torch214-cxx11-cu130-x86_64-linux"


def committed_copy(example: str, tmp_path: Path) -> Path:
    root = copy_example(example, tmp_path)
    new_repo(root, "start")
    return root


def build(root: Path, variant: str) -> dict:
    """`kbuild build --variant V --no-compiler-cache --json`: the job's row."""
    done = kbuild("build", str(root), "--variant", variant, "--no-compiler-cache", "--json", check=True)
    (row,) = json.loads(done.stdout)["jobs"]
    return row


def op_id(root: Path, variant: str) -> str:
    return json.loads((root / "build" / variant / "metadata.json").read_text())["id"]


def edit(file: Path) -> None:
    with open(file, "a") as f:
        f.write("// an edit\n")


@pytest.mark.e2e
def test_an_edit_recompiles_its_unit_and_the_binding_and_a_commit_only_the_binding(tmp_path):
    root = committed_copy("layer-norm", tmp_path)
    cold = build(root, CPU_VARIANT)
    assert cold["status"] == "built" and len(cold["compiled"]) == 6, cold["compiled"]  # binding, 4 unit files, glibc_compat
    first_id = op_id(root, CPU_VARIANT)
    first = tmp_path / "first"
    shutil.copytree(root / "build", first / "build")

    edit(root / "layer_norm_cpu/layer_norm_cpu.cpp")
    edited = build(root, CPU_VARIANT)
    assert sorted(edited["compiled"]) == ["layer_norm_cpu/layer_norm_cpu.cpp", "torch-ext/torch_binding.cpp"]
    edited_id = op_id(root, CPU_VARIANT)
    assert edited_id.endswith("_dirty") and edited_id != first_id

    git(root, "commit", "-q", "-am", "edit")
    committed = build(root, CPU_VARIANT)
    assert committed["compiled"] == ["torch-ext/torch_binding.cpp"]
    final_id = op_id(root, CPU_VARIANT)
    assert final_id == edited_id.removesuffix("_dirty")

    again = build(root, CPU_VARIANT)
    assert again["status"] == "up-to-date" and again["compiled"] is None

    # The result passes the example's own tests, and loads beside the first build in one
    # process: two builds of different sources never share an op namespace.
    tests = run_example_tests(root)
    assert tests.returncode == 0, tests.stdout[-3000:]
    both = subprocess.run([sys.executable, "-c", (
        "import sys, torch\n"
        "from pathlib import Path\n"
        "from kernel_builder.runtime import load_local\n"
        "a, b = (load_local(Path(p)) for p in sys.argv[1:])\n"
        "x, w = torch.randn(4, 64), torch.randn(64)\n"
        "torch.testing.assert_close(a.rms_norm(x, w), b.rms_norm(x, w))\n"
        "print(a.ops.name, b.ops.name)\n"
    ), str(first), str(root)], capture_output=True, text=True, check=False)
    assert both.returncode == 0, both.stderr[-3000:]
    assert both.stdout.split() == [first_id, final_id]


@pytest.mark.e2e
@pytest.mark.cuda
@needs_nvcc
def test_a_cpu_edit_recompiles_no_cuda_object(tmp_path):
    root = committed_copy("swiglu", tmp_path)
    cold = build(root, CU130_VARIANT)
    assert "swiglu_cuda/act_and_mul_kernel.cu" in cold["compiled"]

    edit(root / "swiglu_cpu/act_and_mul.cpp")  # another backend's unit: only the id moves
    assert build(root, CU130_VARIANT)["compiled"] == ["torch-ext/torch_binding.cpp"]

    edit(root / "swiglu_cuda/act_and_mul_kernel.cu")
    assert sorted(build(root, CU130_VARIANT)["compiled"]) == ["swiglu_cuda/act_and_mul_kernel.cu", "torch-ext/torch_binding.cpp"]
    metadata = json.loads((root / "build" / CU130_VARIANT / "metadata.json").read_text())
    assert metadata["backend"]["archs"] == ["8.0", "9.0"]
