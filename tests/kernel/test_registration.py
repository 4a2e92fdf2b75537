"""Which files the op namespace reaches (kernel.registration), and the compile spec that
follows from it: only those files' commands name the id, and the library's target does not."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from conftest import copy_example, optional_module
from ninja_commands import ninja_commands

from kernel_builder.compile.backends.cpu import CpuBackend
from kernel_builder.compile.job import BuildJob
from kernel_builder.environments.probe import current_env
from kernel_builder.kernel.manifest import load_manifest
from kernel_builder.kernel.registration import registration_files
from kernel_builder.variants import arch_variant

BUILD_TOML = """\
[general]
name = "scan"
version = 1
license = "MIT"
backends = ["cpu"]

[torch]
src = ["torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h", "torch-ext/extra.cpp"]

[kernel.plain]
backend = "cpu"
depends = ["torch"]
src = ["cpu/plain.cpp", "cpu/cycle_a.h"]

[kernel.direct]
backend = "cpu"
depends = ["torch"]
src = ["cpu/pybind.cpp"]

[kernel.through_headers]
backend = "cpu"
depends = ["torch"]
include = ["inc"]
src = ["cpu/deep.cpp"]
"""


def kernel(tmp_path: Path) -> Path:
    files = {
        "build.toml": BUILD_TOML,
        "torch-ext/torch_binding.cpp": '#include "registration.h"\nTORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {}\n',
        "torch-ext/torch_binding.h": "#pragma once\n",
        "torch-ext/extra.cpp": "int extra() { return 1; }\n",  # the binding's: always registering
        "torch-ext/scan/__init__.py": "",
        # Includes cycling between two headers, a system header and one that does not exist.
        "cpu/plain.cpp": '#include <vector>\n#include "cycle_a.h"\n#include "missing.h"\nint plain() { return 0; }\n',
        "cpu/cycle_a.h": '#pragma once\n#include "cycle_b.h"\n',
        "cpu/cycle_b.h": '#pragma once\n#include "cycle_a.h"\n// TORCH_EXTENSION_NAMES is another word\n',
        "cpu/pybind.cpp": "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}\n",
        # deep.cpp -> inc/level1.h (the unit's include folder) -> common/level2.h (the repo root).
        "cpu/deep.cpp": '#include "level1.h"\n',
        "inc/level1.h": '#  include <common/level2.h>\n',
        "common/level2.h": "#define NAME_OF_MODULE TORCH_EXTENSION_NAME\n",
    }
    root = tmp_path / "scan"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_binding_and_units_naming_the_macro_register_ops(tmp_path):
    root = kernel(tmp_path)
    found = registration_files(load_manifest(root))
    assert found == {str(root / f) for f in (
        "torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h", "torch-ext/extra.cpp", "cpu/pybind.cpp", "cpu/deep.cpp",
    )}


def test_a_header_outside_the_repo_is_not_followed(tmp_path):
    root = kernel(tmp_path)
    (tmp_path / "outside.h").write_text("TORCH_EXTENSION_NAME\n")
    (root / "cpu/plain.cpp").write_text('#include "../../outside.h"\nint plain() { return 0; }\n')
    assert str(root / "cpu/plain.cpp") not in registration_files(load_manifest(root))


def cpu_job(root: Path, kernel_id: str) -> BuildJob:
    env = current_env()
    variant = arch_variant(env.torch, "cpu", None, "x86_64", "linux")
    return BuildJob(load_manifest(root), env, variant, "cpu", kernel_id, None, root / "build", root.parent / "work")


def test_only_registering_files_are_compiled_with_the_op_namespace(tmp_path):
    optional_module("torch")
    root = copy_example("layer-norm", tmp_path)
    job = cpu_job(root, "abc1234")
    spec = CpuBackend().compile_spec(job)
    named = {f for g in spec.groups if g.definitions for f in g.files}
    assert named == {str(root / "torch-ext/torch_binding.cpp")}
    binding, = [g for g in spec.groups if g.definitions]
    assert binding.definitions == ("TORCH_EXTENSION_NAME=_layer_norm_cpu_abc1234",)
    assert not any("TORCH_EXTENSION_NAME" in d for d in spec.definitions)
    # Another id (an edit, a commit) changes the binding's group only; the target stays.
    other = CpuBackend().compile_spec(dataclasses.replace(job, kernel_id="def5678_dirty"))
    assert spec.target == other.target == "_layer_norm_cpu"
    changed = [g.files for g, h in zip(spec.groups, other.groups) if g != h]
    assert changed == [(str(root / "torch-ext/torch_binding.cpp"),)]
    # Each AVX-512 unit keeps its own flags in a group of its own.
    avx = [g for g in spec.groups if "-mavx512f" in g.options]
    assert len(avx) == 2 and not any(g.definitions for g in avx)


def compile_commands(spec, work_dir: Path) -> dict[str, str]:
    """Each compiled source's command line as Ninja has it (it reruns a command that changed)."""
    return {line.rsplit(" -c ", 1)[1]: line for line in ninja_commands(spec, work_dir) if " -c " in line}


def test_a_flag_in_build_toml_changes_the_commands_of_its_unit_and_the_binding_only(tmp_path):
    optional_module("torch")
    root = copy_example("layer-norm", tmp_path)
    before = compile_commands(CpuBackend().compile_spec(cpu_job(root, "abc1234")), tmp_path / "before")
    toml = root / "build.toml"
    toml.write_text(toml.read_text().replace('cxx-flags = ["-ffp-contract=off"]', 'cxx-flags = ["-ffp-contract=off", "-DMORE=1"]', 1))
    after = compile_commands(CpuBackend().compile_spec(cpu_job(root, "def5678")), tmp_path / "before")
    changed = {Path(f).relative_to(root).as_posix() for f in before if before[f] != after[f]}
    assert changed == {"torch-ext/torch_binding.cpp", "layer_norm_cpu/layer_norm_cpu.cpp", "layer_norm_cpu/huge_pages.cpp"}
    assert len(before) == 6 and before.keys() == after.keys()


def test_every_source_finds_headers_in_the_repos_csrc_as_with_kernel_builder(tmp_path):
    """kernel-builder's extension target has csrc/ on every source's include path; deep-gemm's
    binding relies on it (torch_binding.h includes "utils/torch_compat.hpp" from csrc/)."""
    optional_module("torch")
    root = copy_example("layer-norm", tmp_path)
    spec = CpuBackend().compile_spec(cpu_job(root, "abc1234"))
    assert str(root / "csrc") in spec.includes
    assert spec.includes.index(str(root)) < spec.includes.index(str(root / "csrc"))  # the root is searched first
