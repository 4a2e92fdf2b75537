"""The ROCm backend (kernel_builder.compile.backends.rocm).

There is no ROCm torch here, so ROCm units get a device compile check: hipcc compiles
the device code of the sources that include no torch header, and these tests read the
code objects' ELF headers to see that each one targets the arch it claims. The variant
build against a ROCm torch is checked through the CompileSpec it produces for a
synthetic ROCm build environment."""

from __future__ import annotations

import dataclasses
import re
import struct
import sys
from pathlib import Path

import pytest

from conftest import copy_example, optional_module
from kernel_builder.compile.backends import Unavailable, rocm, rocm_device_check, rocm_toolchain
from kernel_builder.compile.cmake import render_project
from kernel_builder.environments.probe import probe_env
from kernel_builder.errors import BuildError
from kernel_builder.kernel.manifest import load_manifest
from kernel_builder.compile.job import BuildJob
from kernel_builder.variants import arch_variant

HIPCC = rocm_toolchain.hipcc_path()
needs_hipcc = pytest.mark.skipif(HIPCC is None, reason="hipcc not installed (apt-get install hipcc)")

# LLVM's llvm/BinaryFormat/ELF.h: e_machine of AMDGPU code objects and the processor
# field of e_flags (EF_AMDGPU_MACH, mask 0xff).
EM_AMDGPU = 224
EF_AMDGPU_MACH = {"gfx906": 0x2F, "gfx908": 0x30, "gfx90a": 0x3F, "gfx1030": 0x36}


def elf_target(path: Path) -> tuple[int, int]:
    """(e_machine, e_flags) of a little-endian ELF64 file."""
    header = path.read_bytes()[:64]
    assert header[:4] == b"\x7fELF", f"{path.name} is not an ELF file"
    assert header[4] == 2 and header[5] == 1, "expected ELF64, little-endian"
    (machine,) = struct.unpack_from("<H", header, 18)
    (flags,) = struct.unpack_from("<I", header, 48)
    return machine, flags


def old_hipcc() -> bool:
    """HIP 5.x (clang 15) knows no gfx942; a newer ROCm does."""
    version = rocm_toolchain.hipcc_version(HIPCC) if HIPCC else None
    return version is not None and version < (6, 0)


def relu_with_archs(tmp_path: Path, archs: list[str]) -> Path:
    root = copy_example("relu", tmp_path)
    toml = root / "build.toml"
    listed = ", ".join(f'"{a}"' for a in archs)
    toml.write_text(re.sub(r"rocm-archs = \[[^\]]*\]", f"rocm-archs = [{listed}]", toml.read_text()))
    return root


def tiny_kernel(tmp_path: Path, files: dict[str, str], unit: str) -> Path:
    """A one-backend (rocm) kernel repo with the given sources and [kernel.k_rocm] keys."""
    root = tmp_path / "k"
    sources = {"torch-ext/torch_binding.cpp": "", "torch-ext/kk/__init__.py": "", **files}
    for rel, text in sources.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    src = ", ".join(f'"{f}"' for f in files)
    (root / "build.toml").write_text(
        '[general]\nname = "kk"\nversion = 1\nlicense = "MIT"\nbackends = ["rocm"]\n\n[torch]\nsrc = ["torch-ext/torch_binding.cpp"]\n\n'
        f'[kernel.k_rocm]\nbackend = "rocm"\ndepends = ["torch"]\nsrc = [{src}]\n{unit}\n'
    )
    return root


KERNEL = """#include <hip/hip_runtime.h>
#if KBUILD_FLAG != 7
#error "hip-flags did not reach hipcc"
#endif
__global__ void fill(float *x) { x[threadIdx.x] = 1.0f; }
"""


# -- the device compile check, for real -------------------------------------------------


@pytest.mark.e2e
@pytest.mark.rocm
@needs_hipcc
def test_relu_device_check_builds_one_amdgpu_object_per_arch(tmp_path):
    root = relu_with_archs(tmp_path, ["gfx90a", "gfx908", "gfx942"])
    # Ecosystem repos often keep the torch glue in a .cu as well: it is named, not compiled.
    (root / "relu_cuda" / "relu.cpp").rename(root / "relu_cuda" / "relu.cu")
    (root / "build.toml").write_text((root / "build.toml").read_text().replace("relu_cuda/relu.cpp", "relu_cuda/relu.cu"))
    work, log = tmp_path / "work", tmp_path / "work" / "check.log"
    check = rocm_device_check.device_check(load_manifest(root), None, work, log)

    assert check.checked
    assert check.archs == ("gfx90a", "gfx908")
    assert check.dropped == (("gfx942",) if old_hipcc() else ())
    assert {(o.source, o.arch) for o in check.objects} == {
        ("relu_cuda/relu_kernel.cu", "gfx90a"),
        ("relu_cuda/relu_kernel.cu", "gfx908"),
    }
    for obj in check.objects:
        machine, flags = elf_target(obj.path)
        assert machine == EM_AMDGPU, obj.path
        assert flags & 0xFF == EF_AMDGPU_MACH[obj.arch], (obj.arch, hex(flags))
        assert "--cuda-device-only" in obj.command and "-DROCM_KERNEL" in obj.command

    # The torch glue is named, with the header that makes it need a ROCm torch.
    (source, reason), = check.not_checked
    assert source == "relu_cuda/relu.cu"
    assert reason.startswith(rocm_device_check.NEEDS_ROCM_TORCH) and "<ATen/Dispatch.h>" in reason
    assert check.summary.startswith(rocm_device_check.NOT_LINKED)
    assert "not checked: relu_cuda/relu.cu" in check.summary
    if old_hipcc():
        assert "left out gfx942" in check.summary

    # Nothing changed: nothing recompiles. A header edit recompiles every arch.
    before = {o.path: o.path.stat().st_mtime_ns for o in check.objects}
    rocm_device_check.device_check(load_manifest(root), None, work, log)
    assert log.read_text().startswith("# ROCm device compile check: 0 to compile, 2 up to date")
    assert {p: p.stat().st_mtime_ns for p in before} == before
    runtime_h = root / "relu_cuda" / "gpu_runtime.h"
    runtime_h.write_text(runtime_h.read_text() + "\n")
    rocm_device_check.device_check(load_manifest(root), None, work, log)
    assert log.read_text().startswith("# ROCm device compile check: 2 to compile, 0 up to date")


@pytest.mark.e2e
@pytest.mark.rocm
@needs_hipcc
def test_hip_flags_reach_hipcc_and_torch_headers_are_found_through_includes(tmp_path):
    root = tiny_kernel(
        tmp_path,
        {
            "k_rocm/kernel.hip": KERNEL,
            "k_rocm/glue.cu": '#include "glue.h"\nvoid glue() {}\n',
            "k_rocm/glue.h": "#pragma once\n#include <torch/all.h>\n",
        },
        'rocm-archs = ["gfx90a"]\nhip-flags = ["-DKBUILD_FLAG=7", "-ffast-math"]',
    )
    log = tmp_path / "check.log"
    check = rocm_device_check.device_check(load_manifest(root), None, tmp_path / "work", log)
    (obj,) = check.objects
    assert obj.source == "k_rocm/kernel.hip" and obj.arch == "gfx90a"
    assert {"-DKBUILD_FLAG=7", "-ffast-math"} <= set(obj.command)
    assert "-DKBUILD_FLAG=7 -ffast-math" in log.read_text()
    assert check.not_checked == (("k_rocm/glue.cu", f"{rocm_device_check.NEEDS_ROCM_TORCH}: <torch/all.h> in k_rocm/glue.h"),)


@pytest.mark.e2e
@pytest.mark.rocm
@needs_hipcc
def test_compile_error_names_the_source_arch_first_error_and_log(tmp_path):
    # -Wno-error on the command line must not pass for the compiler's error.
    unit = 'hip-flags = ["-DKBUILD_FLAG=7", "-Wno-error=unused-variable"]\nrocm-archs = ["gfx90a"]'
    root = tiny_kernel(tmp_path, {"k_rocm/kernel.hip": KERNEL.replace("1.0f;", "1.0f")}, unit)
    log = tmp_path / "check.log"
    with pytest.raises(BuildError) as info:
        rocm_device_check.device_check(load_manifest(root), None, tmp_path / "work", log)
    message = info.value.message
    assert message.startswith("hipcc failed on k_rocm/kernel.hip for gfx90a: ")
    assert "kernel.hip:5" in message and "error" in message and f"(full log: {log})" in message
    assert "\n" not in message


@pytest.mark.e2e
@pytest.mark.rocm
@needs_hipcc
def test_only_torch_sources_is_a_clear_reason_not_a_failure(tmp_path):
    root = tiny_kernel(tmp_path, {"k_rocm/op.cu": "#include <ATen/ATen.h>\n"}, 'rocm-archs = ["gfx90a"]')
    check = rocm_device_check.device_check(load_manifest(root), None, tmp_path / "work", tmp_path / "check.log")
    assert not check.checked and check.objects == ()
    assert check.summary == rocm_device_check.NOTHING_TO_CHECK
    assert "includes no torch header" in check.summary


@pytest.mark.e2e
@pytest.mark.rocm
@needs_hipcc
def test_archs_are_intersected_with_what_hipcc_compiles(tmp_path):
    supported = rocm_toolchain.hipcc_architectures(HIPCC, ("gfx90a", "gfx908", "gfx942", "gfx90a:xnack+"))
    assert {"gfx90a", "gfx908"} <= supported  # processors; features are checked when compiling
    if old_hipcc():
        assert "gfx942" not in supported
    manifest = load_manifest(relu_with_archs(tmp_path, ["gfx90a:xnack+", "gfx942", "gfx908"]))
    (unit,) = manifest.units_for("rocm")
    kept = rocm_toolchain.effective_archs(unit, rocm_toolchain.supported_archs(manifest, HIPCC), HIPCC)
    assert kept == (("gfx90a:xnack+", "gfx908") if old_hipcc() else ("gfx90a:xnack+", "gfx942", "gfx908"))


@pytest.mark.e2e
@pytest.mark.rocm
@needs_hipcc
def test_no_supported_arch_is_a_clear_error(tmp_path):
    if not old_hipcc():
        pytest.skip("this hipcc compiles gfx942; the case needs an older one")
    manifest = load_manifest(relu_with_archs(tmp_path, ["gfx942", "gfx950"]))
    with pytest.raises(BuildError) as info:
        rocm_device_check.device_check(manifest, None, tmp_path / "work", tmp_path / "check.log")
    message = info.value.message
    assert message.startswith("[kernel.relu_rocm] rocm-archs gfx942, gfx950: this hipcc (HIP ")
    assert "compiles none of them" in message and "gfx90a" in message and "list archs it supports" in message


# -- without hipcc, and the include scan (no compiler needed) ---------------------------


def test_without_hipcc_the_backend_says_what_to_install(tmp_path, monkeypatch):
    optional_module("torch")
    monkeypatch.setattr(rocm_toolchain, "hipcc_path", lambda: None)
    env = dataclasses.replace(probe_env(Path(sys.executable)), hip="7.1.25424-4179531dcd")
    manifest = load_manifest(copy_example("relu", tmp_path))
    target = rocm.RocmBackend().target(manifest, env)
    assert isinstance(target, Unavailable) and target.reason == rocm_toolchain.HIPCC_MISSING
    with pytest.raises(BuildError, match="hipcc not found"):
        rocm_device_check.device_check(manifest, None, tmp_path / "work", tmp_path / "log")


def test_include_scan_separates_kernels_from_torch_glue():
    root = Path(__file__).resolve().parents[2] / "examples" / "relu"
    search = (root,)
    kernel = rocm_device_check.scan_includes(root / "relu_cuda" / "relu_kernel.cu", search, root)
    assert kernel.torch is None
    assert {p.name for p in kernel.files} == {"relu_kernel.cu", "relu_kernel.h", "gpu_runtime.h"}
    glue = rocm_device_check.scan_includes(root / "relu_cuda" / "relu.cpp", search, root)
    assert glue.torch == "<ATen/Dispatch.h> in relu_cuda/relu.cpp"
    header = rocm_device_check.scan_includes(root / "relu_cuda" / "gpu_compat.h", search, root)
    assert header.torch == "<c10/util/BFloat16.h> in relu_cuda/gpu_compat.h"


# -- a variant against a ROCm torch: the CompileSpec -----------------------------------


def rocm_env():
    """This interpreter's torch as if it were a ROCm 7.1 build."""
    return dataclasses.replace(probe_env(Path(sys.executable)), hip="7.1.25424-4179531dcd")


def test_target_names_the_rocm_variant(tmp_path, monkeypatch):
    optional_module("torch")
    env = rocm_env()
    manifest = load_manifest(copy_example("relu", tmp_path))
    monkeypatch.setattr(rocm_toolchain, "hipcc_path", lambda: "/opt/rocm/bin/hipcc")
    monkeypatch.setattr(rocm_toolchain, "hipcc_version", lambda hipcc: (7, 1))
    target = rocm.RocmBackend().target(manifest, env)
    assert target.name == f"torch{env.torch[0]}{env.torch[1]}-cxx11-rocm71-x86_64-linux"
    monkeypatch.setattr(rocm_toolchain, "hipcc_version", lambda hipcc: (5, 2))
    target = rocm.RocmBackend().target(manifest, env)
    assert isinstance(target, Unavailable) and "must share the ROCm major version" in target.reason
    cpu = rocm.RocmBackend().target(manifest, dataclasses.replace(env, hip=None))
    assert isinstance(cpu, Unavailable) and "ROCm variants need a ROCm torch" in cpu.reason


@pytest.mark.e2e
@pytest.mark.rocm
@needs_hipcc
def test_compile_spec_against_a_rocm_torch(tmp_path):
    env = rocm_env()
    root = relu_with_archs(tmp_path, ["gfx90a", "gfx942"])
    (root / "build.toml").write_text(
        (root / "build.toml").read_text().replace('language = "cpp-rocm"', 'language = "cpp-rocm"\nhip-flags = ["-DRELU_FLAG"]')
    )
    manifest = load_manifest(root)
    variant = arch_variant(env.torch, "rocm", (7, 1), "x86_64", "linux")
    job = BuildJob(manifest, env, variant, "rocm", "abc1234", None, tmp_path / "build", tmp_path / "work")
    backend = rocm.RocmBackend()
    spec = backend.compile_spec(job)

    assert spec.languages == ("CXX", "HIP")
    assert spec.cache["CMAKE_HIP_COMPILER"] == rocm_toolchain.hip_clang(HIPCC)
    assert "hipcc" not in Path(spec.cache["CMAKE_HIP_COMPILER"]).name  # CMake refuses the wrapper
    assert spec.cache["CMAKE_HIP_ARCHITECTURES"] == "OFF"
    assert spec.cache["CMAKE_HIP_STANDARD"] == spec.cache["CMAKE_CXX_STANDARD"] == ("20" if env.torch >= (2, 10) else "17")
    (hip,) = [g for g in spec.groups if g.language == "HIP"]
    assert [Path(f).relative_to(root).as_posix() for f in hip.files] == ["relu_cuda/relu_kernel.cu"]
    (cxx,) = [g for g in spec.groups if g.language is None and str(root / "relu_cuda" / "relu.cpp") in g.files]
    assert spec.system_includes == (str(Path(rocm_toolchain.rocm_root(HIPCC)) / "include"),)  # hip/*.h for the glue
    expected_archs = ("gfx90a",) if old_hipcc() else ("gfx90a", "gfx942")
    assert hip.options == tuple(f"--offload-arch={a}" for a in expected_archs) + ("-DRELU_FLAG",)
    assert str(root / "torch-ext" / "torch_binding.cpp") in [f for g in spec.groups if g.language is None for f in g.files]
    assert {"ROCM_KERNEL", "USE_ROCM=1", "__HIP_PLATFORM_AMD__=1"} <= set(spec.definitions)
    # The op namespace reaches the binding only (kernel.registration).
    assert [g.definitions for g in spec.groups if str(root / "torch-ext" / "torch_binding.cpp") in g.files] == [
        (f"TORCH_EXTENSION_NAME={job.ops_name}",)
    ]
    assert not hip.definitions and not cxx.definitions
    # hipcc's flags, then glibc_compat.h for the host side (kernel_builder.compile.glibc_compat).
    assert dict(spec.language_options)["HIP"] == (*rocm_toolchain.HIPCC_FLAGS, f"-include{job.work_dir / 'glibc_compat.h'}")
    assert spec.link_libraries == ("c10", "torch", "torch_cpu", "c10_hip", "torch_hip", "amdhip64")
    assert env.library_dir in spec.link_dirs
    assert backend.metadata(job) == {"archs": list(expected_archs)}

    # The generated project compiles the .cu files as HIP.
    text = (render_project(spec, job.work_dir) / "CMakeLists.txt").read_text()
    assert "project(" in text and "LANGUAGES CXX HIP" in text and "PROPERTIES LANGUAGE HIP" in text
