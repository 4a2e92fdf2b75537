"""A job's input id (job_input_hash, the output cache's key) depends on what the build reads and
builds with, never on where: two checkouts in different folders, with work trees and build
environments in different folders, share an id; a source edit, another torch, another
compiler or another flag each give a new one. And the compiles are told to embed no folder."""

from __future__ import annotations

import shutil
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from kernel_builder.compile.backends import cpu as cpu_backend
from kernel_builder.compile.backends.base import tool_identity
from kernel_builder.compile.backends.cuda import nvcc_path, toolkit_root
from kernel_builder.compile.cmake import CompileSpec
from kernel_builder.compile.job import BuildJob
from kernel_builder.compile.job_folders import EMBEDDED_ROOT, job_folders, neutral, reproducible, spellings
from kernel_builder.environments.probe import BuildEnv
from kernel_builder.kernel.manifest import load_manifest
from kernel_builder.runners.local import job_input_hash
from kernel_builder.variants import Variant

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "tiny"
VARIANT = Variant.parse("torch213-cxx11-cpu-x86_64-linux")


def environment(prefix: Path, torch: str = "2.13.0", python: str = "3.11", cxx11: bool = True) -> BuildEnv:
    """A build environment whose folders are under `prefix` (nothing there is read)."""
    site = prefix / "lib" / f"python{python}" / "site-packages"
    return BuildEnv(str(prefix / "bin" / "python"), python, str(prefix / "include" / f"python{python}"), torch,
                    str(site / "torch"), cxx11)


def checkout(folder: Path) -> Path:
    return Path(shutil.copytree(TINY, folder / "tiny"))


def job(root: Path, env: BuildEnv, work: Path) -> BuildJob:
    return BuildJob(load_manifest(root), env, VARIANT, "cpu", "abc1234", None, root / "build", work)


@pytest.fixture
def first(tmp_path) -> BuildJob:
    return job(checkout(tmp_path / "a"), environment(tmp_path / "env-a"), tmp_path / "cache-a" / "work")


def test_two_checkouts_with_two_environments_share_an_id(first, tmp_path):
    elsewhere = job(checkout(tmp_path / "b" / "deeper"), environment(tmp_path / "venvs" / "other"), tmp_path / "w2")
    assert job_input_hash(elsewhere) == job_input_hash(first)


def fake_compiler(folder: Path, version: str) -> str:
    """A `g++` that answers --version with `version` (and its own folder, which must not count)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "g++"
    script.write_text(f"#!/bin/sh\necho '{version}'\necho 'InstalledDir: {folder}'\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_a_compiler_counts_by_its_version_not_its_folder(first, tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", fake_compiler(tmp_path / "gcc-a" / "bin", "g++ (Debian 12.2.0-14) 12.2.0"))
    one = job_input_hash(first)
    monkeypatch.setenv("CXX", fake_compiler(tmp_path / "opt" / "gcc" / "bin", "g++ (Debian 12.2.0-14) 12.2.0"))
    assert job_input_hash(first) == one, "the same compiler installed in another folder"
    monkeypatch.setenv("CXX", fake_compiler(tmp_path / "gcc-13" / "bin", "g++ (Debian 13.1.0-1) 13.1.0"))
    assert job_input_hash(first) != one, "another compiler release"


def edit_source(job: BuildJob) -> BuildJob:
    add = job.manifest.root / "cpu" / "add.cpp"
    add.write_text(add.read_text() + "\n// an edit\n")
    return job


@pytest.mark.parametrize("change", [
    pytest.param(edit_source, id="source edit"),
    pytest.param(lambda j: replace(j, env=replace(j.env, torch_version="2.13.1")), id="torch version"),
    pytest.param(lambda j: replace(j, env=replace(j.env, cxx11_abi=False)), id="torch ABI"),
    pytest.param(lambda j: replace(j, env=replace(j.env, python_version="3.12")), id="python"),
    pytest.param(lambda j: replace(j, variant=Variant.parse("torch213-cxx11-cpu-aarch64-linux")), id="variant"),
])
def test_every_real_change_gives_a_new_id(first, change):
    before = job_input_hash(first)
    assert job_input_hash(change(first)) != before


def test_a_flag_gives_a_new_id(first, monkeypatch):
    before = job_input_hash(first)
    spec_of = cpu_backend.CpuBackend.compile_spec
    monkeypatch.setattr(cpu_backend.CpuBackend, "compile_spec",
                        lambda self, job: replace(spec_of(self, job), options=spec_of(self, job).options + ("-ffast-math",)))
    assert job_input_hash(first) != before


def test_the_hashed_spec_names_no_folder_of_this_runner(first, tmp_path):
    folders = job_folders(first)
    spec = reproducible(cpu_backend.CpuBackend().compile_spec(first), spellings(folders))
    text = neutral(spec, folders).describe()
    assert str(tmp_path) not in text and "<kernel>/cpu/add.cpp" in text and "<site-packages>/torch/include" in text


def test_the_compilers_embed_no_folder_of_this_runner():
    """GCC and clang apply the last matching map: a folder inside another (an environment
    inside the checkout) is mapped after it, as itself; nvcc hands the maps to its host compiler."""
    folders = {"kernel": Path("/src/k"), "site-packages": Path("/src/k/.venv/lib/site-packages")}
    spec = reproducible(CompileSpec("_k", ".so", ("CXX", "CUDA"), (), language_options=(("CXX", ("-O3",)),)),
                        [(str(path), name) for name, path in folders.items()])
    options = dict(spec.language_options)
    assert options["CXX"] == ("-O3", f"-ffile-prefix-map=/src/k={EMBEDDED_ROOT}/kernel",
                              f"-ffile-prefix-map=/src/k/.venv/lib/site-packages={EMBEDDED_ROOT}/site-packages")
    assert options["CUDA"] == tuple(f"-Xcompiler={o}" for o in options["CXX"][1:])


def test_tool_identity_leaves_out_folders(tmp_path):
    script = fake_compiler(tmp_path / "bin", "clang version 15.0.6")
    assert tool_identity(script) == "clang version 15.0.6"


@pytest.mark.skipif(nvcc_path() is None, reason="no CUDA toolkit on this machine (nvcc not found)")
def test_the_cuda_toolkit_folder_is_found_behind_a_wrapper():
    root = toolkit_root(nvcc_path())
    assert root is not None and (root / "bin" / "nvcc").is_file()
