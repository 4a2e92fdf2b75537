"""build.toml parsing: every section and key of editions none, 5 and 6, and one clear line per mistake."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from conftest import kbuild_in_process
from kernel_builder.errors import ManifestError
from kernel_builder.kernel.manifest import load_manifest

FULL = """
[general]
name = "my-kernel"
version = 2
edition = 5
license = "Apache-2.0"
backends = ["cpu", "cuda", "rocm", "metal", "xpu"]
upstream = "https://example.org/upstream"
source = "https://example.org/source"
python-depends = ["einops"]
kernel-depends = [{repo-id = "kernels-community/activation", version = 1}]

[general.cuda]
minver = "12.6"
maxver = "13.2"
python-depends = ["nvidia-cutlass-dsl"]

[general.hub]
repo-id = "my-org/my-kernel"
branch = "main"

[torch]
src = ["torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h"]
include = ["include"]
pyext = ["py", "json"]
minver = "2.12"
maxver = "2.14"
cxx-flags = ["-DBINDING"]

[torch.stable-abi]
cuda = "2.10"

[kernel.k_cpu]
backend = "cpu"
depends = ["torch"]
src = ["cpu/k.cpp"]
include = ["include"]
cxx-flags = ["-O2"]

[kernel.k_cpu_avx512]
backend = "cpu"
depends = ["torch"]
src = ["cpu/k_avx512.cpp"]
cxx-flags = ["-mavx512f"]

[kernel.k_cuda]
backend = "cuda"
depends = ["torch", "cutlass_3_9"]
src = ["cuda/k.cu"]
cuda-capabilities = ["8.0", "9.0a"]
cuda-flags = ["--use_fast_math"]
cuda-minver = "12.8"

[kernel.k_rocm]
backend = "rocm"
depends = ["torch"]
src = ["cuda/k.cu"]
rocm-archs = ["gfx90a", "gfx942"]
hip-flags = ["-O3"]

[kernel.k_metal]
backend = "metal"
depends = ["torch", "metal-cpp"]
src = ["metal/k.mm", "metal/k.metal"]

[kernel.k_xpu]
backend = "xpu"
depends = ["torch"]
src = ["xpu/k.cpp"]
sycl-flags = ["-fsycl-targets=spir64"]
"""

FILES = [
    "torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h", "torch-ext/my_kernel/__init__.py",
    "include/k.h", "cpu/k.cpp", "cpu/k_avx512.cpp", "cuda/k.cu", "metal/k.mm", "metal/k.metal", "xpu/k.cpp",
]


def make_repo(root: Path, toml: str, files=FILES) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "build.toml").write_text(textwrap.dedent(toml))
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("// test\n")
    return root


def test_full_edition5_manifest_parses_every_key(tmp_path):
    m = load_manifest(make_repo(tmp_path / "k", FULL))
    g = m.general
    assert (g.name, g.version, g.edition, g.license) == ("my-kernel", 2, 5, "Apache-2.0")
    assert g.backends == ("cpu", "cuda", "rocm", "metal", "xpu")
    assert g.python_depends == ("einops",)
    assert g.kernel_depends[0].repo_id == "kernels-community/activation" and g.kernel_depends[0].version == 1
    assert (g.cuda.minver, g.cuda.maxver, g.cuda.python_depends) == ("12.6", "13.2", ("nvidia-cutlass-dsl",))
    assert (g.hub.repo_id, g.hub.branch) == ("my-org/my-kernel", "main")
    assert m.python_name == "my_kernel"
    t = m.torch
    assert t.include == ("include",) and t.pyext == ("py", "json") and (t.minver, t.maxver) == ("2.12", "2.14")
    assert t.cxx_flags == ("-DBINDING",)
    assert t.stable_abi_for("cuda") == "2.10" and t.stable_abi_for("cpu") is None
    cpu = m.units_for("cpu")
    assert [u.name for u in cpu] == ["k_cpu", "k_cpu_avx512"]
    assert cpu[0].include == ("include",) and cpu[1].cxx_flags == ("-mavx512f",)
    (cuda,) = m.units_for("cuda")
    assert cuda.cuda_capabilities == ("8.0", "9.0a") and cuda.cuda_flags == ("--use_fast_math",)
    assert cuda.cuda_minver == "12.8" and cuda.depends == ("torch", "cutlass_3_9")
    (rocm,) = m.units_for("rocm")
    assert rocm.rocm_archs == ("gfx90a", "gfx942") and rocm.hip_flags == ("-O3",)
    (xpu,) = m.units_for("xpu")
    assert xpu.sycl_flags == ("-fsycl-targets=spir64",)


def test_stable_abi_as_one_version_applies_to_every_backend(tmp_path):
    toml = FULL.replace('[torch.stable-abi]\ncuda = "2.10"\n', "").replace(
        'cxx-flags = ["-DBINDING"]', 'cxx-flags = ["-DBINDING"]\nstable-abi = "2.11"'
    )
    m = load_manifest(make_repo(tmp_path / "k", toml))
    assert m.torch.stable_abi_for("cpu") == "2.11" and m.torch.stable_abi_for("cuda") == "2.11"


def test_public_kernel_builder_style_without_edition(tmp_path):
    toml = """
    [general]
    name = "relu"
    version = 1
    license = "apache-2.0"
    backends = ["cpu", "cuda"]

    [torch]
    src = ["torch-ext/torch_binding.cpp"]

    [kernel.relu]
    backend = "cuda"
    depends = ["torch"]
    src = ["cuda/k.cu"]

    [kernel.relu_cpu]
    backend = "cpu"
    depends = ["torch"]
    src = ["cpu/k.cpp"]
    """
    m = load_manifest(make_repo(tmp_path / "relu", toml, FILES[:1] + ["torch-ext/relu/__init__.py", "cuda/k.cu", "cpu/k.cpp"]))
    assert m.general.version == 1 and m.general.edition == 5 and m.torch.pyext == ("py", "pyi")


@pytest.mark.parametrize("key", ["version", "license"])
def test_version_and_license_are_required_in_every_edition(tmp_path, key):
    """kernels 0.19.1 refuses a build.toml without either (edition-less ones as "legacy v3")."""
    for edition in ("edition = 5\n", "edition = 6\n", ""):
        toml = FULL.replace("edition = 5\n", edition) if edition != "edition = 6\n" else edition6(FULL)
        toml = re.sub(rf"^{key} = .*\n", "", toml, count=1, flags=re.M)
        with pytest.raises(ManifestError, match=rf"\[general\] {key}: missing required key"):
            load_manifest(make_repo(tmp_path / f"k{edition.strip()[-1:]}", toml))


def test_a_unit_of_an_unlisted_backend_is_accepted_and_never_built(tmp_path):
    toml = FULL.replace('backends = ["cpu", "cuda", "rocm", "metal", "xpu"]', 'backends = ["cpu", "cuda", "rocm", "metal"]')
    m = load_manifest(make_repo(tmp_path / "k", toml))
    assert any(u.backend == "xpu" for u in m.units) and m.units_for("xpu") == ()

def test_torch_noarch(tmp_path):
    toml = ('[general]\nname = "tri"\nversion = 1\nlicense = "mit"\nbackends = ["cuda", "rocm", "tpu"]\n\n'
            '[torch-noarch]\npyext = ["py"]\ncuda_capabilities = ["9.0"]\n')
    m = load_manifest(make_repo(tmp_path / "tri", toml, ["torch-ext/tri/__init__.py"]))
    assert m.torch is None and m.noarch.pyext == ("py",)
    assert m.noarch.archs_for("cuda") == ("9.0",) and m.noarch.archs_for("rocm") is None


# Each malformed file: (what to change, the words the one-line message must contain).
BAD = {
    "bad-toml": (lambda t: t.replace('name = "my-kernel"', 'name = "my-kernel'), ["invalid TOML", "line"]),
    "unknown-key": (lambda t: t.replace("edition = 5", "edition = 5\ncolour = 1"), ["[general] colour", "unknown key"]),
    "unknown-unit-key": (lambda t: t.replace('cxx-flags = ["-O2"]', 'cxx-flag = ["-O2"]'), ["[kernel.k_cpu] cxx-flag", "unknown key"]),
    "wrong-type": (lambda t: t.replace("version = 2", 'version = "2"'), ["[general] version", "expected a whole number", "'2'"]),
    "wrong-list-type": (lambda t: t.replace('cuda-flags = ["--use_fast_math"]', 'cuda-flags = "--use_fast_math"'), ["[kernel.k_cuda] cuda-flags", "a list of strings"]),
    "missing-required": (lambda t: t.replace('name = "my-kernel"\n', ""), ["[general] name", "missing required key"]),
    "missing-src": (lambda t: t.replace('src = ["xpu/k.cpp"]', ""), ["[kernel.k_xpu] src", "missing required key"]),
    "unknown-backend": (lambda t: t.replace('backend = "xpu"', 'backend = "tpu"'), ["[kernel.k_xpu] backend", "unknown backend 'tpu'"]),
    "unknown-general-backend": (lambda t: t.replace('"metal", "xpu"]', '"metal", "xpu", "npu"]'), ["[general] backends", "unknown backend 'npu'"]),
    "src-missing-file": (lambda t: t.replace('"cpu/k.cpp"', '"cpu/gone.cpp"'), ["[kernel.k_cpu] src", "'cpu/gone.cpp' does not exist"]),
    "unknown-depends": (lambda t: t.replace('"cutlass_3_9"', '"cutlass_9_9"'), ["[kernel.k_cuda] depends", "unknown dependency 'cutlass_9_9'", "cutlass_3_9, "]),
    "missing-depends": (lambda t: t.replace('depends = ["torch"]\nsrc = ["xpu/k.cpp"]', 'src = ["xpu/k.cpp"]'), ["[kernel.k_xpu] depends", "missing required key"]),
    "missing-version": (lambda t: t.replace("version = 2\n", ""), ["[general] version", "missing required key"]),
    "bad-upstream": (lambda t: t.replace('"https://example.org/upstream"', '"example.org/upstream"'), ["[general] upstream", "git URL"]),
    "three-part-minver": (lambda t: t.replace('minver = "2.12"', 'minver = "2.12.1"'), ["[torch] minver", "2.13"]),
    "not-kebab": (lambda t: t.replace('name = "my-kernel"', 'name = "My_Kernel"'), ["[general] name", "kebab-case"]),
    # kernels' KernelName refuses it at load time: refused here, before any build.
    "one-letter": (lambda t: t.replace('name = "my-kernel"', 'name = "k"'), ["[general] name", "2 or more characters"]),
    "misplaced-backend-key": (lambda t: t.replace('cxx-flags = ["-mavx512f"]', 'cuda-flags = ["-x"]'), ["[kernel.k_cpu_avx512] cuda-flags", 'only valid for backend = "cuda"']),
    "bad-capability": (lambda t: t.replace('"9.0a"', '"sm90"'), ["[kernel.k_cuda] cuda-capabilities", "'sm90'"]),
    "python-depends-not-allowed": (lambda t: t.replace('python-depends = ["einops"]', 'python-depends = ["requests"]'), ["[general] python-depends", "'requests'"]),
    "two-frameworks": (lambda t: t + '\n[torch-noarch]\npyext = ["py"]\n', ["exactly one framework section", "[tvm-ffi]"]),
    "unknown-section": (lambda t: t + "\n[extra]\nx = 1\n", ["[extra]", "unknown section"]),
    "bad-edition": (lambda t: t.replace("edition = 5", "edition = 3"), ["[general] edition", "expected 5 or 6"]),
    "language-in-edition-5": (lambda t: t.replace('backend = "xpu"', 'language = "cpp-xpu"'), ["[kernel.k_xpu] language", "edition 6", "uses `backend`"]),
    "build-layout-in-edition-5": (lambda t: t.replace("edition = 5", 'edition = 5\nbuild-layout = "zip"'), ["[general] build-layout", "only valid in edition 6"]),
    "unit-name-dash": (lambda t: t.replace("[kernel.k_xpu]", "[kernel.-k_xpu]"), ["[kernel.-k_xpu]", "letters, digits, '_' or '-'"]),
    "mlx-framework": (lambda t: t + "\n[mlx-noarch]\n", ["[mlx-noarch]", "is edition 6"]),
    # tomllib parses arrays and inline tables recursively: a RecursionError, not one line.
    "deep-array": (lambda t: t + "\n[deep]\nx = " + "[" * 100_000 + "]" * 100_000 + "\n", ["nest more than 32 levels"]),
    "deep-inline-table": (lambda t: t + "\n[deep]\nx = " + "{a=" * 100_000 + "1" + "}" * 100_000 + "\n", ["nest more than 32"]),
    "deeper-than-any-kernel": (lambda t: t + "\n[deep]\nx = " + "[" * 40 + "]" * 40 + "\n", ["nest more than 32"]),
}


def edition6(toml: str) -> str:
    """FULL in edition 6: `language = "cpp-<backend>"` for every unit."""
    return re.sub(r'backend = "(\w+)"', r'language = "cpp-\1"', toml).replace("edition = 5", "edition = 6")


def test_edition6_manifest_maps_each_cpp_language_to_its_backend(tmp_path):
    toml = edition6(FULL).replace("edition = 6", 'edition = 6\nbuild-layout = "zip"')
    toml = toml.replace("[kernel.k_xpu]", "[kernel._k_xpu]")  # the corpus has units starting with '_'
    m = load_manifest(make_repo(tmp_path / "k", toml))
    assert m.general.edition == 6 and m.general.build_layout == "zip"
    assert [(u.name, u.backend) for u in m.units] == [
        ("k_cpu", "cpu"), ("k_cpu_avx512", "cpu"), ("k_cuda", "cuda"), ("k_rocm", "rocm"), ("k_metal", "metal"), ("_k_xpu", "xpu"),
    ]
    (cuda,) = m.units_for("cuda")
    assert cuda.cuda_capabilities == ("8.0", "9.0a") and cuda.depends == ("torch", "cutlass_3_9")
    assert load_manifest(make_repo(tmp_path / "k5", FULL)).general.build_layout == "files"


BAD6 = {
    "rust-unit": (lambda t: t.replace('language = "cpp-cuda"', 'language = "rust-cuda-oxide"'), ["[kernel.k_cuda] language", "require a [tvm-ffi] framework"]),
    "backend-in-edition-6": (lambda t: t.replace('language = "cpp-xpu"', 'backend = "xpu"'), ["[kernel.k_xpu] backend", "edition 6 uses `language`"]),
    "unknown-language": (lambda t: t.replace('language = "cpp-xpu"', 'language = "fortran"'), ["[kernel.k_xpu] language", "unknown language 'fortran'", "cpp-cuda"]),
    "misplaced-language-key": (lambda t: t.replace('cxx-flags = ["-mavx512f"]', 'cuda-flags = ["-x"]'), ['only valid for language = "cpp-cuda"']),
    "bad-build-layout": (lambda t: t.replace("edition = 6", 'edition = 6\nbuild-layout = "tar"'), ["[general] build-layout", "files, zip"]),
}


@pytest.mark.parametrize("case", sorted(BAD6))
def test_malformed_edition6_manifest_fails_with_one_line(tmp_path, case):
    change, words = BAD6[case]
    with pytest.raises(ManifestError) as info:
        load_manifest(make_repo(tmp_path / "k", change(edition6(FULL))))
    assert "\n" not in info.value.message and "build.toml" in info.value.message
    for word in words:
        assert word in info.value.message, (case, info.value.message)


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_manifest_fails_with_one_line_and_exit_2(tmp_path, case):
    change, words = BAD[case]
    repo = make_repo(tmp_path / "k", change(FULL))
    with pytest.raises(ManifestError) as info:
        load_manifest(repo)
    assert info.value.exit_code == 2
    for word in words:
        assert word in info.value.message, (case, info.value.message)
    assert "build.toml" in info.value.message


@pytest.mark.parametrize("case", ["bad-toml", "unknown-key", "wrong-type", "missing-required", "unknown-backend", "src-missing-file", "unknown-depends", "not-kebab", "one-letter"])
def test_cli_reports_malformed_manifest_in_one_line(tmp_path, case):
    change, words = BAD[case]
    repo = make_repo(tmp_path / "k", change(FULL))
    result = kbuild_in_process("build", str(repo))
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and lines[0].startswith("kbuild: error:")
    assert words[0] in lines[0]


def test_missing_build_toml(tmp_path):
    with pytest.raises(ManifestError, match="build.toml: not found"):
        load_manifest(tmp_path)


def test_missing_python_package(tmp_path):
    files = [f for f in FILES if "my_kernel" not in f]
    with pytest.raises(ManifestError, match="torch-ext/my_kernel/__init__.py"):
        load_manifest(make_repo(tmp_path / "k", FULL, files))


def test_tvm_ffi_parses_and_the_torch_pipeline_refuses_it_in_one_line(tmp_path):
    """[tvm-ffi] is accepted as kernels accepts it (its package under tvm-ffi-ext/); `kbuild build`
    builds it (tests/pipeline/test_tvm_ffi.py), while `kbuild plan`, a torch pipeline's, says in one
    line that it does not apply, before anything compiles."""
    toml = ('[general]\nname = "relu-tvm"\nversion = 1\nedition = 5\nlicense = "MIT"\nbackends = ["cpu"]\n\n'
            '[tvm-ffi]\nsrc = ["tvm-ffi-ext/binding.cpp"]\ncxx-flags = ["-DX"]\n\n'
            '[kernel.relu_cpu]\nbackend = "cpu"\ndepends = []\nsrc = ["cpu/k.cpp"]\n')
    repo = make_repo(tmp_path / "relu-tvm", toml, ["tvm-ffi-ext/binding.cpp", "tvm-ffi-ext/relu_tvm/__init__.py", "cpu/k.cpp"])
    manifest = load_manifest(repo)
    assert manifest.framework == "tvm-ffi" and manifest.other.cxx_flags == ("-DX",)
    assert manifest.package_dir == repo / "tvm-ffi-ext" / "relu_tvm"
    result = kbuild_in_process("plan", str(repo))
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "[tvm-ffi]: only `kbuild build` builds this framework" in lines[0]


def test_mlx_noarch_build_is_refused_in_one_line(tmp_path):
    """[mlx-noarch] (metal only, edition 6) parses as kernels parses it; kbuild builds none yet."""
    toml = '[general]\nname = "mlx-relu"\nversion = 1\nedition = 6\nlicense = "MIT"\nbackends = ["metal"]\n\n[mlx-noarch]\n'
    repo = make_repo(tmp_path / "mlx-relu", toml, [])
    result = kbuild_in_process("build", str(repo))
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "[mlx-noarch]: kbuild reads this framework but does not build it" in lines[0]


@pytest.mark.parametrize("kebab", ["cuda-capabilities", "rocm-archs"])
def test_noarch_arch_lists_in_kebab_case_name_the_spelling_kernels_reads(tmp_path, kebab):
    """kernel-builder's docs write `cuda-capabilities` under [torch-noarch]; kernels' parser
    refuses it and reads `cuda_capabilities`: the one line says so."""
    toml = f'[general]\nname = "tri"\nversion = 1\nlicense = "mit"\nbackends = ["cuda"]\n\n[torch-noarch]\n{kebab} = []\n'
    with pytest.raises(ManifestError) as info:
        load_manifest(make_repo(tmp_path / "tri", toml, ["torch-ext/tri/__init__.py"]))
    assert f"[torch-noarch] {kebab}: unknown key" in info.value.message and kebab.replace("-", "_") in info.value.message
