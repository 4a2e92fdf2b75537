"""The architecture a development build compiles (kernel_builder.compile.backends.cuda_arch)
and how a --cuda-arch build honours it: no GPU or nvcc needed, their answers are given."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import copy_example
from kernel_builder.pipeline.options import BuildOptions
from kernel_builder.pipeline.plan import work_tree
from kernel_builder.compile.backends.cuda import effective_capabilities
from kernel_builder.compile.backends.cuda_arch import choose_cuda_arch
from kernel_builder.errors import KbuildError, UsageError
from kernel_builder.kernel.manifest import KernelUnit, load_manifest
from kernel_builder.variants import Variant

NVCC_13 = frozenset({"7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "11.0", "12.0", "12.1"})


@pytest.fixture(scope="module")
def relu(tmp_path_factory):
    return load_manifest(copy_example("relu", tmp_path_factory.mktemp("arch")))


def test_a_gpu_here_is_compiled_for_its_own_architecture(relu):
    choice = choose_cuda_arch(relu, gpus=("8.6",), cuda=(13, 0), supported=NVCC_13)
    assert choice.archs == ("8.6",) and choice.reason == "this machine's GPU"
    assert choose_cuda_arch(relu, gpus=("8.0", "9.0"), cuda=(13, 0), supported=NVCC_13).archs == ("8.0", "9.0")


def test_without_a_gpu_the_named_architecture_else_the_newest_the_kernel_lists_that_nvcc_compiles(relu):
    assert choose_cuda_arch(relu, ("9.0",), cuda=(13, 0), supported=NVCC_13).archs == ("9.0",)
    # relu lists no capabilities: CUDA 13.0's defaults, whose newest is 12.1.
    default = choose_cuda_arch(relu, cuda=(13, 0), supported=NVCC_13)
    assert default.archs == ("12.1",) and "newest" in default.reason
    assert choose_cuda_arch(relu, cuda=(13, 0), supported=frozenset({"7.5", "8.0", "9.0"})).archs == ("9.0",)
    # A named architecture wins over the GPU's: the author asked for it.
    assert choose_cuda_arch(relu, ("9.0",), gpus=("8.0",), cuda=(13, 0), supported=NVCC_13).archs == ("9.0",)


def test_an_architecture_nvcc_lacks_is_one_line(relu):
    for requested, gpus in ((("3.5",), ()), ((), ("13.0",))):
        with pytest.raises(UsageError) as error:
            choose_cuda_arch(relu, requested, gpus, cuda=(13, 0), supported=NVCC_13)
        message = error.value.message
        assert "\n" not in message and "nvcc 13.0 cannot compile for it (it compiles for 7.5 to 12.1)" in message
        assert error.value.exit_code == 2


def test_a_restricted_unit_keeps_its_own_spelling_and_drops_ptx():
    unit = KernelUnit(name="k", backend="cuda", src=("k.cu",), cuda_capabilities=("8.0", "9.0a", "12.0+PTX"))
    assert effective_capabilities(unit, (13, 0), NVCC_13, ("9.0",)) == ("9.0a",)
    assert effective_capabilities(unit, (13, 0), NVCC_13, ("12.0",)) == ("12.0",)
    assert effective_capabilities(unit, (13, 0), NVCC_13, ("8.6",)) == ("8.6",)  # not listed: the GPU's own
    with pytest.raises(UsageError, match="--cuda-arch 5.0: nvcc 13.0 cannot compile for it"):
        effective_capabilities(unit, (13, 0), NVCC_13, ("5.0",))


def test_a_unit_of_other_gpus_own_instructions_keeps_its_list():
    """sage-attention's FP4 unit lists only 10.0a: compiled for sm_90 by `--cuda-arch 9.0`, ptxas
    refused its `cvt ... e2m1x2`. Arch-specific code compiles for its own GPUs only."""
    fp4 = KernelUnit(name="fp4", backend="cuda", src=("k.cu",), cuda_capabilities=("10.0a", "12.0a"))
    assert effective_capabilities(fp4, (13, 0), NVCC_13, ("9.0",)) == ("10.0a", "12.0a")
    assert effective_capabilities(fp4, (13, 0), NVCC_13, ("12.0",)) == ("12.0a",)  # one of its own: restricted
    portable = KernelUnit(name="k", backend="cuda", src=("k.cu",), cuda_capabilities=("8.9",))
    assert effective_capabilities(portable, (13, 0), NVCC_13, ("9.0",)) == ("9.0",)  # 8.9 code runs on newer GPUs
    unlisted = KernelUnit(name="k", backend="cuda", src=("k.cu",))  # the defaults: CI's e2e builds crashed here
    assert effective_capabilities(unlisted, (13, 0), NVCC_13, ("9.0",)) == ("9.0",)


def test_the_build_option_is_parsed_once_and_refused_by_the_docker_runner():
    assert BuildOptions(cuda_arch="8.0, 9.0a").cuda_arch == ("8.0", "9.0a")
    assert BuildOptions().cuda_arch == ()
    for given, words in (({"cuda_arch": "sm_90"}, "--cuda-arch takes compute capabilities"),
                         ({"cuda_arch": "9.0", "runner": "docker"}, "--runner docker cannot honour --cuda-arch")):
        with pytest.raises(KbuildError) as error:
            BuildOptions(**given)
        assert error.value.exit_code == 2 and "\n" not in error.value.message and words in error.value.message


def test_a_restricted_or_dev_build_has_a_work_tree_of_its_own():
    root = Path("/cache/work/k")
    cuda = Variant.parse("torch214-cxx11-cu130-x86_64-linux")
    release = work_tree(root, cuda)
    assert release == root / "torch214-cxx11-cu130-x86_64-linux"
    assert work_tree(root, cuda, ("9.0",)) == root / "torch214-cxx11-cu130-x86_64-linux-sm90"
    assert work_tree(root, cuda, ("9.0",), "dev") == root / "torch214-cxx11-cu130-x86_64-linux-dev-sm90"
    assert work_tree(root, cuda.with_style(cuda.other_style().style)) == release
