"""The CUDA backend: capabilities and flags, then real nvcc builds of examples/swiglu
against a CUDA torch in kbuild's managed build environment (created on first use, about
a minute and 6 GB), read back with cuobjdump and imported in that environment.

There is no GPU here: importing registers the ops with their CUDA implementation, which
is what the test checks; running them needs a GPU (see the device checks in benchmarks/)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, copy_example, kbuild
from cuda_toolkit import CUDA_VARIANT, NVCC, embedded, hidden_toolkit, needs_hiding, needs_nvcc
from kernel_builder.compile.backends import cuda
from kernel_builder.compile.backends.cuda import (
    default_capabilities,
    effective_capabilities,
    gencode_flags,
    nvcc_architectures,
    units_for_version,
)
from kernel_builder.paths import cache_dir, short_key
from kernel_builder.errors import BuildError
from kernel_builder.kernel.manifest import KernelUnit, load_manifest


# -- capabilities and flags (no compiler needed) -------------------------------------------


def unit(**keys) -> KernelUnit:
    return KernelUnit(name="k", backend="cuda", src=("k.cu",), **keys)


def test_default_capabilities_follow_the_cuda_version_with_ptx_for_the_newest():
    assert default_capabilities((13, 0))[0] == "7.5" and default_capabilities((13, 0))[-1] == "12.1+PTX"
    assert default_capabilities((12, 8))[0] == "7.0" and default_capabilities((12, 8))[-1] == "12.0+PTX"
    assert default_capabilities((12, 6))[-1] == "9.0+PTX" and "10.0" not in default_capabilities((12, 6))
    # kernel-builder's defaults since kernels#783 (FORMATS.md): CUDA 13 drops 7.0/7.2 and has no 8.8;
    # 10.3 (B300) and 12.1 (GB10) from CUDA 12.9 on.
    assert default_capabilities((13, 2)) == ("7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1+PTX")
    assert default_capabilities((12, 9))[-3:] == ("10.3", "12.0", "12.1+PTX") and "10.1" in default_capabilities((12, 9))
    assert "10.3" not in default_capabilities((12, 8)) and "12.1" not in default_capabilities((12, 8))
    assert default_capabilities((12, 8))[:2] == ("7.0", "7.2") and default_capabilities((12, 6))[:2] == ("7.0", "7.2")


def test_capabilities_are_intersected_with_what_nvcc_supports():
    supported = frozenset({"7.5", "8.0", "9.0"})
    assert effective_capabilities(unit(cuda_capabilities=("7.0", "8.0", "9.0a", "12.0")), (13, 0), supported) == ("8.0", "9.0a")
    assert effective_capabilities(unit(), (13, 0), supported) == ("7.5", "8.0", "9.0")
    with pytest.raises(BuildError, match=r"\[kernel.k\] cuda-capabilities 3.5, 5.0: nvcc 13.0 supports none of them"):
        effective_capabilities(unit(cuda_capabilities=("3.5", "5.0")), (13, 0), supported)


def test_gencode_flags_give_sass_per_capability_and_ptx_when_asked():
    assert gencode_flags(("8.0", "9.0a", "12.1+PTX")) == (
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90a,code=sm_90a",
        "-gencode=arch=compute_121,code=sm_121",
        "-gencode=arch=compute_121,code=compute_121",
    )


def test_cuda_minver_leaves_a_unit_out_of_older_cuda(tmp_path):
    root = copy_example("swiglu", tmp_path)
    toml = root / "build.toml"
    toml.write_text(toml.read_text().replace('cuda-capabilities = ["8.0", "9.0"]', 'cuda-capabilities = ["8.0", "9.0"]\ncuda-minver = "13.0"'))
    manifest = load_manifest(root)
    assert [u.name for u in units_for_version(manifest, (13, 0))] == ["swiglu_cuda"]
    assert units_for_version(manifest, (12, 8)) == ()


# -- finding nvcc: $CUDA_HOME, then PATH, then /usr/local/cuda ---------------------------------


def fake_cuda_home(folder: Path) -> str:
    """A CUDA folder whose bin/nvcc is a symlink to the real one (what a toolkit installed
    by hand or by a package manager often looks like)."""
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "nvcc").symlink_to(os.path.realpath(NVCC))
    return str(folder / "bin" / "nvcc")


@pytest.fixture
def no_nvcc_anywhere(tmp_path, monkeypatch):
    """No CUDA_HOME/CUDA_PATH, a PATH without nvcc, and an empty standard folder."""
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    (tmp_path / "empty-path").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    monkeypatch.setattr(cuda, "STANDARD_CUDA_HOME", tmp_path / "no-standard-cuda")
    assert cuda.nvcc_path() is None


@needs_nvcc
def test_nvcc_in_cuda_home_is_found_without_path(tmp_path, monkeypatch, no_nvcc_anywhere):
    nvcc = fake_cuda_home(tmp_path / "cuda-home")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda-home"))
    assert cuda.nvcc_path() == nvcc
    assert cuda.nvcc_version(nvcc) == cuda.nvcc_version(NVCC)  # the real nvcc runs through the link


@needs_nvcc
def test_the_standard_cuda_folder_is_looked_in_last(tmp_path, monkeypatch, no_nvcc_anywhere):
    standard = fake_cuda_home(tmp_path / "standard")
    monkeypatch.setattr(cuda, "STANDARD_CUDA_HOME", tmp_path / "standard")
    assert cuda.nvcc_path() == standard
    on_path = fake_cuda_home(tmp_path / "on-path")
    monkeypatch.setenv("PATH", str(Path(on_path).parent))
    assert cuda.nvcc_path() == on_path
    home = fake_cuda_home(tmp_path / "home")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "home"))
    assert cuda.nvcc_path() == home


def test_no_nvcc_names_every_place_looked_in_and_the_wheel_route(no_nvcc_anywhere):
    """Without nvcc the reason also names the variant NVIDIA's compiler wheels build: the
    default matrix's newest torch for this platform with a CUDA release that has wheels."""
    from kernel_builder.runtime.system import host_platform
    from kernel_builder.environments import cuda_wheels
    from kernel_builder.variants import Variant, default_matrix

    reason = cuda.CudaBackend().default_variant(None).reason
    assert reason.startswith(
        "nvcc not found in $CUDA_HOME/bin, on PATH or in /usr/local/cuda/bin "
        "(install the CUDA toolkit, or set CUDA_HOME to its folder); or build with NVIDIA's compiler wheels ("
    )
    assert "\n" not in reason and re.search(r"\((about [\d.]+ [KMG]B.*, once|downloaded once|already downloaded)\)", reason)
    variant = Variant.parse(re.search(r"kbuild build --variant (\S+)$", reason).group(1))
    here = "-".join(host_platform())
    with_wheels = [v for v in default_matrix().for_backend("cuda")
                   if v.platform == here and v.backend_version in cuda_wheels.WHEEL_RELEASES]
    assert variant.backend_version in cuda_wheels.WHEEL_RELEASES and variant.platform == here
    assert variant.torch == max(v.torch for v in with_wheels)
    # Where its environment and wheels are there already, nothing is to be downloaded.
    from kernel_builder.environments.download_cost import DownloadCost

    assert cuda.WheelRoute(variant, DownloadCost(())).hint().startswith("; or build with NVIDIA's compiler wheels (already downloaded)")


@pytest.mark.e2e
@pytest.mark.cuda
@needs_hiding
def test_a_build_without_the_toolkit_names_the_compiler_wheel_route(tmp_path):
    """The real CLI where no nvcc can be found (a mount namespace hides it): the CUDA skip
    of a plain build (`kbuild plan`, which plans as `kbuild build` does) says which variant
    NVIDIA's compiler wheels build, and `kbuild variants` finds that one buildable."""
    root = copy_example("swiglu", tmp_path)
    environment = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}

    def kbuild_hidden(*args: str) -> list | dict:
        command = hidden_toolkit([sys.executable, "-m", "kernel_builder.cli", *args, str(root), "--json"])
        result = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    [skip] = [row for row in kbuild_hidden("plan") if row["backend"] == "cuda"]
    assert not skip["buildable"] and skip["reason"].startswith("nvcc not found"), skip
    # The cost as the route says it: a size, unknown, or nothing (a suite store that kept the wheels).
    variant = re.search(r"; or build with NVIDIA's compiler wheels \((?:about [\d.]+ [KMG]B, once|downloaded once|already downloaded)\): "
                        r"kbuild build --variant (\S+)$", skip["reason"])
    assert variant, skip["reason"]
    rows = {row["variant"]: row for row in kbuild_hidden("variants")}
    assert rows[variant.group(1)]["buildable"], rows[variant.group(1)]


@needs_nvcc
@needs_nvcc
@pytest.mark.e2e
@pytest.mark.cuda
def test_half_converts_to_float_as_with_kernel_builder(tmp_path):
    """kernel-builder drops torch's -D__CUDA_NO_HALF_CONVERSIONS__ and friends for CUDA >= 11.8
    and adds -DENABLE_FP8; kernels-community code converts __half to float implicitly
    (punica-sgmv, nvfp4-gemm), which compiles with kbuild's flags too."""
    source = tmp_path / "half.cu"
    source.write_text('#include <cuda_fp16.h>\n__device__ float widen(__half h) { return h; }\n'
                      '#ifndef ENABLE_FP8\n#error ENABLE_FP8 is not defined\n#endif\n')
    done = subprocess.run([NVCC, *cuda.NVCC_FLAGS, *gencode_flags(["9.0"]), "-c", str(source), "-o", str(tmp_path / "half.o")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_nvcc_lists_its_architectures():
    archs = nvcc_architectures(NVCC)
    assert {"8.0", "9.0"} <= archs and all(a.count(".") == 1 for a in archs)


@pytest.mark.e2e
def test_general_cuda_bounds_skip_the_backend_with_the_reason(tmp_path):
    root = copy_example("swiglu", tmp_path)
    toml = root / "build.toml"
    toml.write_text(toml.read_text().replace("\n[torch]\n", '\n[general.cuda]\nmaxver = "12.8"\n\n[torch]\n', 1))
    result = kbuild("build", str(root), "--json", "--no-create-env", "--variant", "torch213-cxx11-cu130-x86_64-linux")
    assert result.returncode == 2 and "[general.cuda] maxver 12.8 excludes CUDA 13.0" in result.stderr


# -- real builds -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def swiglu_cuda(built_example) -> Path:
    """examples/swiglu built as docs/examples.md runs it (a session copy): CPU and CUDA variants (their
    SASS and registration are checked in test_example_kernels.py)."""
    built = built_example("swiglu")
    assert built.rows["cuda"]["variant"] == CUDA_VARIANT, built.rows["cuda"]
    return built.root / "build" / CUDA_VARIANT


@pytest.mark.e2e
@pytest.mark.creates_env
@needs_nvcc
def test_one_architecture_with_ptx(tmp_path, swiglu_cuda):
    root = copy_example("swiglu", tmp_path)
    toml = root / "build.toml"
    toml.write_text(toml.read_text().replace('cuda-capabilities = ["8.0", "9.0"]', 'cuda-capabilities = ["8.0+PTX"]\ncuda-flags = ["-DSWIGLU_TEST_FLAG=1"]'))
    result = kbuild("build", str(root), "--variant", CUDA_VARIANT, "--nvcc-threads", "1", "--max-jobs", "1", check=True)
    assert "built" in result.stdout
    folder = root / "build" / CUDA_VARIANT
    metadata = json.loads((folder / "metadata.json").read_text())
    assert metadata["backend"]["archs"] == ["8.0"]
    library = folder / f"{metadata['id']}.abi3.so"
    assert embedded(library, "elf") == ["sm_80"]
    assert embedded(library, "ptx") == ["compute_80"]
    # The unit's cuda-flags and the requested parallelism reached nvcc.
    work = cache_dir("work", short_key(str(root.resolve())), CUDA_VARIANT)
    assert "NVCC_APPEND_FLAGS=--threads 1" in (work / "build.log").read_text()
    compile_commands = json.loads((work / "build" / "compile_commands.json").read_text())
    cu = [c["command"] for c in compile_commands if c["file"].endswith(".cu")]
    assert cu and "-DSWIGLU_TEST_FLAG=1" in cu[0] and "-gencode=arch=compute_80,code=compute_80" in cu[0]


# A registry that the unit's .cpp defines and its .cu files fill from static initializers,
# as layer-norm's ln_api.cpp and ln_*.cu do: the .cpp's objects must link (and so be
# initialized) first, in build.toml's order, or the import crashes in an unconstructed map.
_REGISTRY_FILES = {
    "build.toml": """[general]
name = "registry"
version = 1
license = "MIT"
backends = ["cuda"]

[torch]
src = ["torch-ext/torch_binding.cpp"]

[kernel.registry]
backend = "cuda"
depends = ["torch"]
cuda-capabilities = ["9.0"]
src = ["registry/registry.h", "registry/registry.cpp", "registry/launchers.cu"]
""",
    "registry/registry.h": """#pragma once
#include <cstdint>
#include <unordered_map>
extern std::unordered_map<int, int> LAUNCHERS;
struct Register { Register(int key, int value) { LAUNCHERS.insert({key, value}); } };
int64_t launcher_count();
""",
    "registry/registry.cpp": """#include "registry.h"
std::unordered_map<int, int> LAUNCHERS;
int64_t launcher_count() { return static_cast<int64_t>(LAUNCHERS.size()); }
""",
    "registry/launchers.cu": """#include "registry.h"
__global__ void launcher() {}
static Register first(1, 1), second(2, 2);
""",
    "torch-ext/torch_binding.cpp": """#include <torch/library.h>
#include "registration.h"
#include "registry/registry.h"
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) { ops.def("launcher_count() -> int", &launcher_count); }
REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
""",
    "torch-ext/registry/__init__.py": """from ._ops import ops

def launcher_count() -> int:
    return ops.launcher_count()
""",
}


@pytest.mark.e2e
@pytest.mark.creates_env
@needs_nvcc
def test_objects_link_in_build_toml_order_so_static_registries_fill(tmp_path):
    from kernel_builder.environments.store import EnvSpec, find_env

    root = tmp_path / "registry"
    for name, text in _REGISTRY_FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    result = kbuild("build", str(root), "--variant", CUDA_VARIANT, "--max-jobs", "1")
    assert result.returncode == 0, result.stderr[-2000:]  # the build's import check loaded it
    cmake = (cache_dir("work", short_key(str(root.resolve())), CUDA_VARIANT) / "CMakeLists.txt").read_text()
    listed = [line.strip().strip('"') for line in cmake.split("add_library(", 1)[1].split(")", 1)[0].splitlines()[1:]]
    assert [Path(f).name for f in listed[:3]] == ["torch_binding.cpp", "registry.cpp", "launchers.cu"], listed
    env = find_env(EnvSpec((2, 14), "cu130"))
    count = subprocess.run(
        [env.python, "-c", "import sys; from kernel_builder.runtime import load_local; "
         "print(load_local(sys.argv[1]).launcher_count())", str(root)],
        capture_output=True, text=True, check=False, env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert count.stdout.split() == ["2"], count.stderr[-2000:]
