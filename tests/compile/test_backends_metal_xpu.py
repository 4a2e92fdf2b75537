"""Metal and XPU build steps, checked on a machine with neither toolchain.

The jobs are examples/relu's metal and xpu units against the real torch of this
interpreter, relabelled where needed (an XPU version). Past the CompileSpec, the rendered
project is configured for real with CMake + Ninja: configuring needs neither xcrun nor
icpx (the shader steps are custom commands that run only when built, and the host C++
compiler stands in for clang++/icpx), so `ninja -t commands` shows the exact command
lines a Mac or oneAPI machine would run. The Metal shader chain even runs, with a
stand-in `xcrun` that copies its inputs, to check the generated header end to end.
Compiling the Objective-C++ and SYCL sources themselves needs the real toolchains."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copy_example, optional_module
from ninja_commands import ninja_commands, only
from kernel_builder.compile.backends import Unavailable, metal, xpu
from kernel_builder.compile.backends.metal import MetalBackend
from kernel_builder.compile.backends.xpu import XpuBackend
from kernel_builder.variants import xpu_version
from kernel_builder.compile.cmake import _tool
from kernel_builder.environments.probe import probe_env
from kernel_builder.kernel.manifest import load_manifest
from kernel_builder.compile.job import BuildJob
from kernel_builder.variants import arch_variant

optional_module("torch")  # the environment its specs are made for

SYCL_FLAGS = ["-fsycl-targets=spir64_gen", "-Xs", "-device pvc"]


@pytest.fixture(scope="module")
def env():
    return probe_env(Path(sys.executable))


@pytest.fixture
def relu(tmp_path) -> Path:
    """examples/relu, plus sycl-flags and a .sycl source on its xpu unit."""
    root = copy_example("relu", tmp_path)
    toml = root / "build.toml"
    toml.write_text(toml.read_text().replace(
        'src = ["relu_xpu/relu.cpp"]',
        f'src = ["relu_xpu/relu.cpp", "relu_xpu/extra.sycl"]\nsycl-flags = {SYCL_FLAGS!r}'.replace("'", '"'),
    ))
    (root / "relu_xpu" / "extra.sycl").write_text("// A SYCL source by torch's naming convention.\n")
    return root


def job(root: Path, env, backend: str, variant) -> BuildJob:
    return BuildJob(load_manifest(root), env, variant, backend, "abc1234", None, root / "build", root.parent / "work")


@pytest.fixture
def metal_job(relu, env) -> BuildJob:
    return job(relu, env, "metal", arch_variant(env.torch, "metal", None, "aarch64", "darwin"))


@pytest.fixture
def xpu_job(relu, env) -> BuildJob:
    env = dataclasses.replace(env, xpu="20260")
    return job(relu, env, "xpu", arch_variant(env.torch, "xpu", (2026, 0), "x86_64", "linux"))


# -- Metal ------------------------------------------------------------------------------
def test_metal_spec(metal_job):
    spec = MetalBackend().compile_spec(metal_job)
    root = metal_job.manifest.root
    air, link, embed = spec.commands
    assert air.command == ("xcrun", "-sdk", "macosx", "metal", "-std=metal4.0",
                           "-c", str(root / "relu_metal/relu.metal"), "-o", "metal/relu_metal/relu.air")
    # The shader recompiles when the header it includes changes.
    assert str(root / "relu_metal/common.h") in air.depends
    assert link.command == ("xcrun", "-sdk", "macosx", "metallib", "metal/relu_metal/relu.air",
                            "-o", "metal/relu.metallib")
    header = metal_job.work_dir / "generated" / "embedded_metallib.h"
    assert embed.outputs == (str(header),) and embed.command[0] == sys.executable
    namespace = embed.command[4]
    assert embed.command[2:4] == ("metal/relu.metallib", str(header)) and re.fullmatch(r"metallib_relu_[0-9a-f]{7}", namespace)
    assert spec.files[0][0] == "embed_metallib.py" and embed.command[1] == str(metal_job.work_dir / "embed_metallib.py")
    assert {"METAL_KERNEL", 'EMBEDDED_METALLIB_HEADER="embedded_metallib.h"',
            f"EMBEDDED_METALLIB_NAMESPACE={namespace}"} <= set(spec.definitions)
    # The op namespace reaches the binding only, and the metallib's name does not move with it.
    binding, = [g for g in spec.groups if str(root / "torch-ext/torch_binding.cpp") in g.files]
    assert binding.definitions == ("TORCH_EXTENSION_NAME=_relu_metal_abc1234",)
    assert "abc1234" not in str(spec.definitions) + namespace
    other = dataclasses.replace(metal_job, kernel_id="def5678")
    assert MetalBackend().compile_spec(other).commands[2].command[4] == namespace
    mm, = [g for g in spec.groups if any(f.endswith(".mm") for f in g.files)]
    assert mm.files == (str(root / "relu_metal/relu.mm"),) and mm.options[:2] == ("-x", "objective-c++")
    compiled = [f for g in spec.groups for f in g.files]
    assert not any(f.endswith((".h", ".metal")) for f in compiled)
    assert "-fobjc-arc" not in str(spec)
    assert {"SHELL:-framework Metal", "SHELL:-framework Foundation"} <= set(spec.link_options)
    assert spec.cache["CMAKE_CXX_COMPILER"] == "/usr/bin/clang++"
    assert spec.cache["CMAKE_OSX_DEPLOYMENT_TARGET"] == "26.0"
    assert metal_job.variant.name == f"torch{env_tag(metal_job)}-metal-aarch64-darwin"


def env_tag(job: BuildJob) -> str:
    return f"{job.env.torch[0]}{job.env.torch[1]}"


def test_metal_ninja_commands(metal_job):
    spec = MetalBackend().compile_spec(metal_job)
    lines = ninja_commands(spec, metal_job.work_dir)
    root = metal_job.manifest.root
    air = only(lines, "xcrun -sdk macosx metal ")
    assert f"-std=metal4.0 -c {root}/relu_metal/relu.metal -o metal/relu_metal/relu.air" in air
    metallib = only(lines, "xcrun -sdk macosx metallib ")
    assert "metal/relu_metal/relu.air -o metal/relu.metallib" in metallib
    embed = only(lines, "embed_metallib.py")
    mm = only(lines, "-c " + str(root / "relu_metal/relu.mm"))
    assert "-x objective-c++" in mm
    assert '-DEMBEDDED_METALLIB_HEADER=\\"embedded_metallib.h\\"' in mm
    assert re.search(r"-DEMBEDDED_METALLIB_NAMESPACE=metallib_relu_[0-9a-f]{7} ", mm) and "-DMETAL_KERNEL" in mm
    assert "TORCH_EXTENSION_NAME" not in mm
    binding = only(lines, "-c " + str(root / "torch-ext/torch_binding.cpp"))
    assert "-x objective-c++" not in binding and "-DTORCH_EXTENSION_NAME=_relu_metal_abc1234" in binding
    assert not [line for line in lines if "common.h" in line]
    # Ninja runs the shader steps in order, all before the Objective-C++ that includes their header.
    assert lines.index(air) < lines.index(metallib) < lines.index(embed) < lines.index(mm)
    link = only(lines, " -o _relu_metal.abi3.so ")
    assert "-framework Metal -framework Foundation" in link and "-Wl,-undefined,dynamic_lookup" in link


def test_metal_shader_steps_run_and_embed_the_metallib(metal_job, tmp_path):
    """The chain runs for real with an `xcrun` stand-in that concatenates its inputs into
    its output; the header then holds the metallib's bytes and the createLibrary contract."""
    spec = MetalBackend().compile_spec(metal_job)
    ninja_commands(spec, metal_job.work_dir)
    fake = tmp_path / "bin" / "xcrun"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        'shift 2; tool=$1; shift; out=""; ins=""\n'
        "while [ $# -gt 0 ]; do case $1 in -o) out=$2; shift 2;; -c) ins=\"$ins $2\"; shift 2;; -*) shift;;"
        ' *) ins="$ins $1"; shift;; esac; done\n'
        'cat $ins > "$out"\n'
    )
    fake.chmod(0o755)
    header = metal_job.work_dir / "generated" / "embedded_metallib.h"
    run_env = dict(os.environ, PATH=f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    build = metal_job.work_dir / "build"
    subprocess.run([_tool("ninja"), "-C", str(build), str(header)], check=True, capture_output=True, env=run_env)
    text = header.read_text()
    shader = (metal_job.manifest.root / "relu_metal/relu.metal").read_bytes()
    assert ",".join(str(b) for b in shader[:40]) in text
    assert re.search(r"namespace metallib_relu_[0-9a-f]{7} \{", text)
    assert "inline id<MTLLibrary> createLibrary(id<MTLDevice> device, NSError **error)" in text
    assert "dispatch_data_create(" in text and "newLibraryWithData:data error:error" in text
    # Editing a header that the shader includes reruns the shader steps.
    later = header.stat().st_mtime + 10
    os.utime(metal_job.manifest.root / "relu_metal/common.h", (later, later))
    dry = subprocess.run([_tool("ninja"), "-C", str(build), "-n", str(header)], check=True, capture_output=True,
                         text=True, env=run_env).stdout
    assert "Compiling Metal shader relu_metal/relu.metal" in dry and "Embedding" in dry


def test_metal_without_shaders_has_no_steps(metal_job):
    toml = metal_job.manifest.path
    toml.write_text(toml.read_text().replace('"relu_metal/relu.metal", ', ""))
    spec = MetalBackend().compile_spec(dataclasses.replace(metal_job, manifest=load_manifest(toml.parent)))
    assert spec.commands == () and spec.files == ()
    assert not [d for d in spec.definitions if d.startswith("EMBEDDED_METALLIB")]


# -- XPU --------------------------------------------------------------------------------
def test_xpu_spec(xpu_job):
    spec = XpuBackend().compile_spec(xpu_job)
    root = xpu_job.manifest.root
    assert spec.cache["CMAKE_CXX_COMPILER"].endswith("icpx")
    assert "-fsycl" in spec.options and "-fsycl" in spec.link_options
    assert "XPU_KERNEL" in spec.definitions and not any("TORCH_EXTENSION_NAME" in d for d in spec.definitions)
    binding, = [g for g in spec.groups if str(root / "torch-ext/torch_binding.cpp") in g.files]
    assert binding.definitions == ("TORCH_EXTENSION_NAME=_relu_xpu_abc1234",)
    cpp, = [g for g in spec.groups if str(root / "relu_xpu/relu.cpp") in g.files]
    assert cpp.options == tuple(SYCL_FLAGS)
    sycl, = [g for g in spec.groups if str(root / "relu_xpu/extra.sycl") in g.files]
    assert sycl.language == "CXX" and sycl.options == ("-x", "c++", *SYCL_FLAGS)
    assert "SHELL:-fsycl-targets=spir64_gen -Xs '-device pvc'" in spec.link_options
    assert {"c10_xpu", "torch_xpu"} <= set(spec.link_libraries)
    assert xpu_job.variant.name == f"torch{env_tag(xpu_job)}-cxx11-xpu20260-x86_64-linux"


def test_xpu_ninja_commands(xpu_job):
    lines = ninja_commands(XpuBackend().compile_spec(xpu_job), xpu_job.work_dir)
    root = xpu_job.manifest.root
    flags = '-fsycl-targets=spir64_gen -Xs "-device pvc"'
    unit = only(lines, "-c " + str(root / "relu_xpu/relu.cpp"))
    assert "-fsycl " in unit and flags in unit and "-DXPU_KERNEL" in unit and "TORCH_EXTENSION_NAME" not in unit
    sycl = only(lines, "-c " + str(root / "relu_xpu/extra.sycl"))
    assert "-x c++" in sycl and flags in sycl
    binding = only(lines, "-c " + str(root / "torch-ext/torch_binding.cpp"))
    assert "-fsycl " in binding and flags not in binding and "-DTORCH_EXTENSION_NAME=_relu_xpu_abc1234" in binding
    link = only(lines, " -o _relu_xpu.abi3.so ")
    assert "-fsycl " in link and flags in link and "-lc10_xpu" in link and "-ltorch_xpu" in link
    # The unit names its own targets: kbuild adds none of its defaults.
    assert "spir64_gen,spir64" not in link and "-Xsycl-target-backend" not in link


@pytest.mark.parametrize("oneapi, devices", [((2026, 0), "pvc,bmg-g21,cri"), ((2025, 3), "pvc,bmg-g21")])
def test_xpu_default_targets_and_ieee_fp32_flags(tmp_path, env, oneapi, devices):
    """examples/relu as shipped (no sycl-flags): kernel-builder's ahead-of-time devices (cri from
    oneAPI 2026.0, kernels#734) in one spir64_gen image plus spir64, and IEEE fp32 division and
    square root (kernels#752), on the unit's compile and on the link."""
    root = copy_example("relu", tmp_path)
    env = dataclasses.replace(env, xpu=f"{oneapi[0]}{oneapi[1]}")
    xpu = job(root, env, "xpu", arch_variant(env.torch, "xpu", oneapi, "x86_64", "linux"))
    lines = ninja_commands(XpuBackend().compile_spec(xpu), xpu.work_dir)
    ieee = "-fsycl -fhonor-nans -fhonor-infinities -fno-associative-math -fno-approx-func -foffload-fp32-prec-div -foffload-fp32-prec-sqrt"
    unit = only(lines, "-c " + str(root / "relu_xpu/relu.cpp"))
    assert ieee in unit and "-fsycl-targets=spir64_gen,spir64" in unit and "--offload-compress" in unit
    link = only(lines, " -o _relu_xpu.abi3.so ")
    assert ieee in link and "-fsycl-targets=spir64_gen,spir64" in link
    options = "-cl-intel-enable-auto-large-GRF-mode -cl-poison-unsupported-fp64-kernels -cl-intel-greater-than-4GB-buffer-required"
    aot = f"-Xsycl-target-backend=spir64_gen \"-device {devices} -options '{options}'\""
    assert aot in link, link


@pytest.mark.parametrize("text, version", [
    ("20250101", (2025, 1)),  # what torch.version.xpu reports: YYYYMMPP
    ("20260", (2026, 0)),  # the variant's spelling
    ("2026.0", (2026, 0)),
    ("2025.3.1", (2025, 3)),
    ("xpu", None),
])
def test_xpu_version(text, version):
    assert xpu_version(text) == version


# -- target() ---------------------------------------------------------------------------
def test_targets_here_name_the_missing_tool(env):
    manifest = load_manifest(Path(__file__).resolve().parents[2] / "examples" / "relu")
    if shutil.which("xcrun"):
        pytest.skip("this machine has xcrun; the test is about a machine without Apple's tools")
    assert MetalBackend().target(manifest, env) == Unavailable("metal", "Metal needs macOS with Xcode: xcrun not found")
    if shutil.which("icpx"):
        pytest.skip("this machine has icpx; the test is about a machine without oneAPI")
    reason = XpuBackend().target(manifest, dataclasses.replace(env, xpu="20260")).reason
    assert reason.startswith("icpx not found on PATH")


def test_targets_with_the_toolchain(env, monkeypatch):
    """Toolchains present (stand-ins): the torch's flavour decides."""
    monkeypatch.setattr(xpu, "icpx_path", lambda: "/opt/intel/bin/icpx")
    monkeypatch.setattr(xpu, "icpx_version", lambda icpx: (2026, 0))
    cpu_env = dataclasses.replace(env, cuda=None, hip=None, xpu=None)
    assert "is not an XPU build" in XpuBackend().target(None, cpu_env).reason
    assert "oneAPI year" in XpuBackend().target(None, dataclasses.replace(cpu_env, xpu="20250101")).reason
    variant = XpuBackend().target(None, dataclasses.replace(cpu_env, xpu="20260000"))
    assert variant.name.endswith("-cxx11-xpu20260-" + "-".join(metal.host_platform()))

    monkeypatch.setattr(metal.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(metal, "host_platform", lambda: ("aarch64", "darwin"))
    monkeypatch.setattr(metal, "_xcrun", lambda *args: "/usr/bin/metal")
    variant = MetalBackend().target(None, cpu_env)
    assert variant.name == f"torch{env.torch[0]}{env.torch[1]}-metal-aarch64-darwin"
    cuda_env = dataclasses.replace(cpu_env, cuda="13.0")
    assert "Metal variants need a macOS torch" in MetalBackend().target(None, cuda_env).reason
