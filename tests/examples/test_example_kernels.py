"""The three example kernels (swiglu, layer-norm, flash-attn), each built with `kbuild build`
as docs/examples.md runs it (on a session copy of examples/<name>), checked backend by backend:

- CPU: built, loads through kbuild's loader and the `kernels` package, and the example's
  own test suite (ops, gradients, odd sizes, layouts, layers) passes against the build;
- CUDA (where nvcc 13.0 is): built for sm_80 and sm_90, exactly that SASS embedded, and
  the variant registers CUDA kernels when imported in its own (cu130) environment;
- ROCm (where hipcc is): the device code of the CUDA sources, behind the portability
  header, compiles for gfx90a;
- Metal and XPU: skipped for want of xcrun / icpx, naming the tool; their generated
  projects are configured with the host compiler standing in and the command lines checked.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, run_example_tests, optional_module
from kernel_builder.compile.backends.cuda import nvcc_path
from kernel_builder.compile.backends.rocm_toolchain import hipcc_path
from cuda_toolkit import CUDA_VARIANT, embedded, needs_nvcc
from ninja_commands import ninja_commands, only

torch = optional_module("torch")

pytestmark = pytest.mark.e2e

CPU_VARIANT = "torch{}{}-cxx11-cpu-x86_64-linux".format(*torch.__version__.split(".")[:2])


@dataclasses.dataclass(frozen=True)
class Example:
    name: str
    op: str                   # an op that must be registered for CUDA in the CUDA variant
    layers: frozenset         # what the built layers module exports
    rocm_sources: tuple       # the torch-free .cu files hipcc must compile for gfx90a
    metal_shader: str
    metal_glue: str
    metal_shader_depends: tuple  # headers whose change must rebuild the shader
    xpu_source: str


EXAMPLES = [
    Example("swiglu", "silu_and_mul", frozenset({"SiluAndMul", "GeluAndMul", "GeluTanhAndMul", "LlamaMLP"}),
            ("swiglu_cuda/act_and_mul_kernel.cu",),
            "swiglu_metal/act_and_mul.metal", "swiglu_metal/act_and_mul.mm",
            ("swiglu_common/activations.h", "swiglu_metal/params.h"), "swiglu_xpu/act_and_mul.cpp"),
    Example("layer-norm", "rms_norm_fwd", frozenset({"RMSNorm", "LayerNorm", "RMSNormMLP", "RMSNormMLPLayout"}),
            ("layer_norm_cuda/norm_kernels.cu", "layer_norm_cuda/silu_and_mul_kernel.cu"),
            "layer_norm_metal/layer_norm.metal", "layer_norm_metal/layer_norm.mm",
            ("layer_norm_metal/metal_params.h",), "layer_norm_xpu/layer_norm_xpu.cpp"),
    Example("flash-attn", "fwd", frozenset({"LlamaAttention"}),
            ("flash_attn_cuda/flash_fwd_kernel.cu", "flash_attn_cuda/flash_bwd_kernel.cu"),
            "flash_attn_metal/flash_attn.metal", "flash_attn_metal/flash_attn.mm",
            ("flash_attn_metal/metal_params.h",), "flash_attn_xpu/flash_attn_xpu.cpp"),
]


@pytest.fixture(params=EXAMPLES, ids=lambda e: e.name, scope="module")
def example(request, built_example):
    return request.param, built_example(request.param.name)


def test_cpu_variant_builds_and_loads_through_both_loaders(example):
    import kernels

    from kernel_builder.runtime import load_local

    spec, built = example
    row = built.rows["cpu"]
    assert row["status"] in ("built", "up-to-date") and row["variant"] == CPU_VARIANT, row
    ours, theirs = load_local(built.root), kernels.get_local_kernel(built.root, backend="cpu")
    for module in (ours, theirs):
        assert spec.layers <= set(vars(module.layers)), sorted(vars(module.layers))
        assert hasattr(module.ops, spec.op)


# The instruction sets an example's own tests may skip for, as their reasons name them, and
# the /proc/cpuinfo flag that says this CPU has it.
CPU_FEATURES = {"AVX512_BF16": "avx512_bf16", "AVX-512": "avx512f"}


def test_own_test_suite_passes(example):
    """Every test passes; the only skips allowed are a faster path's, on a CPU that lacks
    its instruction set (checked against /proc/cpuinfo)."""
    _, built = example
    result = run_example_tests(built.root)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert " passed" in lines[-1] and "failed" not in lines[-1] and "error" not in lines[-1], lines[-1]
    flags = set(Path("/proc/cpuinfo").read_text().split()) if Path("/proc/cpuinfo").exists() else set()
    skips = [line for line in lines if line.startswith("SKIPPED")]
    for line in skips:
        named = [flag for feature, flag in CPU_FEATURES.items() if feature in line and "on this CPU" in line
                 or f"this CPU has no {feature}" in line]
        assert named and named[0] not in flags, f"a skip that this CPU does not explain: {line}"


@pytest.mark.cuda
def test_cuda_variant_embeds_sm80_and_sm90(example):
    _, built = example
    row = built.rows["cuda"]
    if not nvcc_path():
        assert row["status"] == "skipped" and "nvcc" in row["detail"], row
        pytest.skip("nvcc not found: the CUDA variant is skipped")
    assert row["status"] in ("built", "up-to-date") and row["variant"] == CUDA_VARIANT, row
    folder = built.root / "build" / CUDA_VARIANT
    metadata = json.loads((folder / "metadata.json").read_text())
    assert metadata["backend"] == {"type": "cuda", "archs": ["8.0", "9.0"]}
    library = folder / f"{metadata['id']}.abi3.so"
    assert embedded(library, "elf") == ["sm_80", "sm_90"]
    assert embedded(library, "ptx") == []


@needs_nvcc
def test_cuda_variant_registers_cuda_kernels_in_its_environment(example):
    """No GPU here: the variant imports in the cu130 environment, and its op has a CUDA
    kernel and no CPU one (calling it with CPU tensors is refused by the dispatcher)."""
    from kernel_builder.environments.store import EnvSpec, find_env

    spec, built = example
    env = find_env(EnvSpec((2, 14), "cu130"))
    assert env is not None, "the build should have created the cu130 environment"
    check = r"""
import sys, torch
from kernel_builder.runtime import load_local
k = load_local(sys.argv[1])
name = getattr(k.ops, sys.argv[2]).default.name()
assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "CUDA"), name
assert not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU"), name
print("registered", name)
"""
    result = subprocess.run(
        [env.python, "-c", check, str(built.root), spec.op],
        capture_output=True, text=True, check=False, env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"registered _{spec.name.replace('-', '_')}_cuda_" in result.stdout, result.stdout


@pytest.mark.rocm
def test_rocm_device_code_compiles_for_gfx90a(example):
    spec, built = example
    row = built.rows["rocm"]
    if not hipcc_path():
        assert row["status"] == "skipped" and "hipcc" in row["detail"], row
        pytest.skip("hipcc not found: the ROCm check is skipped")
    assert row["status"] == "checked", row
    detail = row["detail"]
    assert detail.startswith("compiled, not linked: no ROCm torch in the build environment"), detail
    assert f"({', '.join(spec.rocm_sources)}) for gfx90a" in detail, detail
    assert "not checked" not in detail  # every .cu of the unit is torch-free


def test_metal_and_xpu_are_skipped_naming_their_toolchains(example):
    _, built = example
    assert built.rows["metal"]["status"] == "skipped" and "xcrun not found" in built.rows["metal"]["detail"]
    assert built.rows["xpu"]["status"] == "skipped" and "icpx not found" in built.rows["xpu"]["detail"]


def test_metal_and_xpu_builds_are_generated(example, tmp_path):
    """What a Mac or a oneAPI machine would compile, configured here with the host
    compiler standing in (as tests/compile/test_backends_metal_xpu.py does for relu)."""
    from kernel_builder.compile.backends.metal import MetalBackend
    from kernel_builder.compile.backends.xpu import XpuBackend
    from kernel_builder.environments.probe import probe_env
    from kernel_builder.kernel.manifest import load_manifest
    from kernel_builder.compile.job import BuildJob
    from kernel_builder.variants import arch_variant

    spec, built = example
    root = built.root
    manifest = load_manifest(root)
    env = probe_env(Path(sys.executable))

    def job(backend, variant, env):
        return BuildJob(manifest, env, variant, backend, "abc1234", None, tmp_path / "build", tmp_path / f"work-{backend}")

    metal = job("metal", arch_variant(env.torch, "metal", None, "aarch64", "darwin"), env)
    metal_spec = MetalBackend().compile_spec(metal)
    lines = ninja_commands(metal_spec, metal.work_dir)
    air = only(lines, "xcrun -sdk macosx metal ")
    assert f"-c {root / spec.metal_shader}" in air
    glue = only(lines, f"-c {root / spec.metal_glue}")
    assert "-x objective-c++" in glue and "-DMETAL_KERNEL" in glue and "EMBEDDED_METALLIB_HEADER" in glue
    assert lines.index(air) < lines.index(glue)
    shader_step, = [c for c in metal_spec.commands if c.outputs[0].endswith(".air")]
    assert {str(root / h) for h in spec.metal_shader_depends} <= set(shader_step.depends)

    xpu = job("xpu", arch_variant(env.torch, "xpu", (2026, 0), "x86_64", "linux"), dataclasses.replace(env, xpu="20260"))
    lines = ninja_commands(XpuBackend().compile_spec(xpu), xpu.work_dir)
    unit = only(lines, f"-c {root / spec.xpu_source}")
    assert "-fsycl " in unit and "-DXPU_KERNEL" in unit
