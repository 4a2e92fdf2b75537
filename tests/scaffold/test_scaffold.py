"""`kbuild init`'s renderer (kernel_builder.scaffold.new_kernel) and the templates under templates/init.

The last test compiles the generated CPU sources for real with torch's C++ extension
loader (30-60 s); the rest only render files."""

from __future__ import annotations

import importlib.util
import os
import re
import stat
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import optional_module
from kernel_builder.errors import KbuildError
from kernel_builder.kernel.manifest import load_manifest
from kernel_builder.scaffold.new_kernel import BACKENDS, scaffold, templates_dir

pytestmark = pytest.mark.usefixtures("ci_install")  # workflows need an install source

COMMON = {
    "build.toml",
    "README.md",
    ".gitignore",
    ".gitattributes",
    "torch-ext/torch_binding.cpp",
    "torch-ext/torch_binding.h",
    "torch-ext/my_op/__init__.py",
    "torch-ext/my_op/layers.py",
    "tests/test_my_op.py",
    "benchmarks/benchmark.py",
}
PER_FOLDER = {
    "cpu": {"my_op_cpu/scale_add.cpp"},
    "cuda": {"my_op_cuda/scale_add.cpp", "my_op_cuda/scale_add_kernel.cu", "my_op_cuda/scale_add_kernel.h",
             "my_op_cuda/gpu_compat.h", "my_op_cuda/gpu_runtime.h"},
    "metal": {"my_op_metal/scale_add.metal", "my_op_metal/scale_add.mm"},
    "xpu": {"my_op_xpu/scale_add.cpp"},
}


def render(tmp_path: Path, backends, name: str = "my-op") -> tuple[Path, set[str]]:
    root = tmp_path / name
    written = scaffold(root, name, backends)
    rels = {p.relative_to(root).as_posix() for p in written}
    on_disk = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    assert rels == on_disk, "scaffold() must return exactly the files it wrote"
    assert len(written) == len(rels)
    return root, rels


def expected_files(*folders: str) -> set[str]:
    files = set(COMMON)
    for folder in folders:
        files |= PER_FOLDER[folder]
    return files


# -- which files each backend set produces ------------------------------------------


@pytest.mark.parametrize(
    "backends,folders",
    [
        (["cpu"], ["cpu"]),
        (["cpu", "cuda"], ["cpu", "cuda"]),
        (list(BACKENDS), ["cpu", "cuda", "metal", "xpu"]),
        (["rocm"], ["cuda"]),  # ROCm compiles the CUDA source through gpu_compat.h
        (["metal"], ["metal"]),
        (["xpu", "cpu"], ["cpu", "xpu"]),
    ],
)
def test_files_per_backend_set(tmp_path, backends, folders):
    _, files = render(tmp_path, backends)
    # Every kernel GitHub's Linux runners can build gets the CI workflow (kbuild ci github).
    workflow = set() if backends == ["metal"] else {".github/workflows/kbuild.yml"}
    assert files == expected_files(*folders) | workflow


def test_backends_constant():
    assert BACKENDS == ("cpu", "cuda", "metal", "rocm", "xpu")


# -- build.toml ---------------------------------------------------------------------


@pytest.mark.parametrize("backends", [["cpu"], ["cpu", "cuda"], list(BACKENDS), ["rocm"], ["xpu", "metal"]])
def test_build_toml_has_one_unit_per_backend(tmp_path, backends):
    root, files = render(tmp_path, backends)
    toml = tomllib.loads((root / "build.toml").read_text())
    general = toml["general"]
    assert general["name"] == "my-op"
    assert general["version"] == 1 and general["edition"] == 6 and general["license"] == "Apache-2.0"
    assert general["backends"] == [b for b in BACKENDS if b in backends]  # canonical order
    assert toml["torch"]["src"] == ["torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h"]
    assert set(toml["kernel"]) == {f"my_op_{b}" for b in backends}
    for backend in backends:
        unit = toml["kernel"][f"my_op_{backend}"]
        assert unit["language"] == f"cpp-{backend}" and unit["depends"] == ["torch"]
        assert unit["src"], backend
        for src in unit["src"]:
            assert src in files, f"{backend} unit lists {src}, which was not written"
    if "rocm" in backends:
        assert "my_op_cuda/scale_add_kernel.cu" in toml["kernel"]["my_op_rocm"]["src"]
        assert toml["kernel"]["my_op_rocm"]["rocm-archs"]
    # Every file the binding and units name exists, and kbuild's own reader accepts it.
    manifest = load_manifest(root)
    assert manifest.name == "my-op" and manifest.python_name == "my_op"
    assert {u.backend for u in manifest.units} == set(backends)


def test_every_source_file_is_listed_in_build_toml(tmp_path):
    root, files = render(tmp_path, list(BACKENDS))
    toml = tomllib.loads((root / "build.toml").read_text())
    listed = set(toml["torch"]["src"]) | {s for unit in toml["kernel"].values() for s in unit["src"]}
    sources = {f for f in files if f.split("/")[0].startswith("my_op_") or f.startswith("torch-ext/torch_binding")}
    assert sources == listed


# -- rendered contents ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["my-op", "xy", "fused-rms-norm2", "a1-b2-c3"])
def test_rendered_python_is_valid_and_names_are_substituted(tmp_path, name):
    root, files = render(tmp_path, list(BACKENDS), name=name)
    python_name = name.replace("-", "_")
    assert f"torch-ext/{python_name}/__init__.py" in files
    assert f"tests/test_{python_name}.py" in files
    for rel in files:
        text = (root / rel).read_text()
        assert "__python_name__" not in rel and not rel.endswith(".j2") and "dot-" not in rel
        # `${{ ... }}` is GitHub Actions' own syntax in the workflow, not jinja.
        assert not re.search(r"(?<!\$)\{\{", text) and "{%" not in text, f"unrendered jinja in {rel}"
        assert "__python_name__" not in text, rel
        if rel.endswith(".py"):
            compile(text, str(root / rel), "exec")
    toml = tomllib.loads((root / "build.toml").read_text())
    assert toml["general"]["name"] == name


def test_binding_registers_every_backend(tmp_path):
    root, _ = render(tmp_path, ["cpu"])
    binding = (root / "torch-ext" / "torch_binding.cpp").read_text()
    assert 'ops.def("scale_add(Tensor! out, Tensor x, Tensor y, float alpha) -> ()")' in binding
    assert '#include "registration.h"' in binding
    assert "TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops)" in binding
    assert "REGISTER_EXTENSION(TORCH_EXTENSION_NAME)" in binding
    for macro, key in (("CPU_KERNEL", "kCPU"), ("CUDA_KERNEL", "kCUDA"), ("ROCM_KERNEL", "kCUDA"),
                       ("METAL_KERNEL", "kMPS"), ("XPU_KERNEL", "kXPU")):
        assert f"defined({macro})" in binding and f"torch::{key}" in binding


def test_generated_tests_use_both_loaders_and_skip_without_build(tmp_path):
    root, _ = render(tmp_path, ["cpu"])
    text = (root / "tests" / "test_my_op.py").read_text()
    assert "load_local(ROOT)" in text and "get_local_kernel(ROOT, backend=\"cpu\")" in text
    assert "kbuild build my-op" in text
    readme = (root / "README.md").read_text()
    assert "kbuild build my-op" in readme and "scale_add" in readme
    assert "*.so filter=lfs diff=lfs merge=lfs -text" in (root / ".gitattributes").read_text()
    ignored = (root / ".gitignore").read_text().split()
    assert "build/" in ignored and "__pycache__/" in ignored


def test_the_generated_readme_runs_with_the_quick_start_install(tmp_path):
    """Its commands are kbuild's own: the quick start installs no pytest (`kbuild test` brings it)."""
    from kernel_builder.cli.main import app

    root, _ = render(tmp_path, ["cpu"])
    block = re.search(r"## Build, test, load\n\n```bash\n(.*?)```", (root / "README.md").read_text(), re.S)
    commands = [line.split("#")[0].split() for line in block.group(1).splitlines() if line.strip()]
    assert [words[:3] for words in commands] == [["kbuild", "build", "my-op"], ["kbuild", "test", "my-op"],
                                                 ["kbuild", "bench", "my-op"]]
    assert {c.name for c in app.registered_commands} >= {"build", "test", "bench"}
    assert "pytest my-op" not in (root / "README.md").read_text()


def test_layer_passes_the_kernels_layer_rules(tmp_path):
    """kernels refuses layers with a constructor or extra members."""
    optional_module("torch")
    import torch

    root, _ = render(tmp_path, ["cpu"])
    package = root / "torch-ext" / "my_op"
    (package / "_ops.py").write_text("class _Ops:\n    pass\n\nops = _Ops()\n")
    module = _import_package(package, "kbuild_scaffold_layer_check")
    layer = module.layers.ScaleAdd
    assert issubclass(layer, torch.nn.Module) and layer.__init__ is torch.nn.Module.__init__
    import inspect

    extra = {n for n, _ in inspect.getmembers(layer)} - {n for n, _ in inspect.getmembers(torch.nn.Module)}
    assert extra <= {"can_torch_compile", "has_backward"}


def test_scaffold_accepts_an_existing_empty_folder(tmp_path):
    (tmp_path / "my-op").mkdir()
    _, files = render(tmp_path, ["cpu"])
    assert files == expected_files("cpu") | {".github/workflows/kbuild.yml"}


def test_scaffold_creates_missing_parents_and_normal_permissions(tmp_path):
    root = tmp_path / "a" / "b" / "my-op"
    scaffold(root, "my-op", ["cpu"])
    assert (root / "build.toml").is_file()
    mode = stat.S_IMODE(root.stat().st_mode)
    assert mode == 0o777 & ~_umask(), oct(mode)  # not mkdtemp's private 0700


def test_duplicate_backends_are_collapsed(tmp_path):
    root, _ = render(tmp_path, ["cuda", "cpu", "cuda"])
    assert tomllib.loads((root / "build.toml").read_text())["general"]["backends"] == ["cpu", "cuda"]


# -- refusals: a helpful KbuildError and nothing written ------------------------------


@pytest.mark.parametrize("name", ["Bad_Name", "MyOp", "my_op", "1op", "-op", "op-", "my--op", "", "my op", "op/x"])
def test_bad_name_is_refused(tmp_path, name):
    with pytest.raises(KbuildError, match="kebab-case") as info:
        scaffold(tmp_path / "k", name, ["cpu"])
    assert "e.g. my-kernel" in info.value.message
    assert list(tmp_path.iterdir()) == []


def test_unknown_backend_names_the_valid_ones(tmp_path):
    with pytest.raises(KbuildError, match="unknown backend 'tpu'") as info:
        scaffold(tmp_path / "k", "ok", ["cpu", "tpu"])
    assert "cpu, cuda, metal, rocm, xpu" in info.value.message
    with pytest.raises(KbuildError, match="unknown backends 'tpu', 'CUDA'"):
        scaffold(tmp_path / "k", "ok", ["tpu", "CUDA"])
    assert list(tmp_path.iterdir()) == []


def test_no_backend_is_refused(tmp_path):
    with pytest.raises(KbuildError, match="at least one of cpu, cuda"):
        scaffold(tmp_path / "k", "ok", [])
    assert list(tmp_path.iterdir()) == []


def test_existing_folder_is_refused_and_kept(tmp_path):
    dest = tmp_path / "my-op"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    with pytest.raises(KbuildError, match="already exists; choose another name or remove it") as info:
        scaffold(dest, "my-op", ["cpu"])
    assert info.value.exit_code == 1
    assert [p.name for p in dest.iterdir()] == ["notes.txt"] and (dest / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my-op"]


def test_existing_file_is_refused(tmp_path):
    (tmp_path / "my-op").write_text("")
    with pytest.raises(KbuildError, match="already exists"):
        scaffold(tmp_path / "my-op", "my-op", ["cpu"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my-op"]


def test_failure_half_way_leaves_nothing_behind(tmp_path, monkeypatch):
    import shutil

    import kernel_builder.scaffold.new_kernel as module

    calls = []

    def failing_copy(src, dst, *a, **k):
        calls.append(src)
        if len(calls) == 3:
            raise OSError("disk full")
        return shutil.copyfile(src, dst, *a, **k)

    monkeypatch.setattr(module.shutil, "copyfile", failing_copy)
    with pytest.raises(OSError, match="disk full"):
        scaffold(tmp_path / "new" / "deeper" / "my-op", "my-op", list(BACKENDS))
    assert len(calls) == 3
    assert list(tmp_path.iterdir()) == [], "no staging folder, no half repo, no created parents"


def test_failure_keeps_an_existing_empty_folder_and_parent(tmp_path, monkeypatch):
    import kernel_builder.scaffold.new_kernel as module

    (tmp_path / "my-op").mkdir()

    def boom(*a, **k):
        raise RuntimeError("render failed")

    monkeypatch.setattr(module.shutil, "copyfile", boom)
    with pytest.raises(RuntimeError):
        scaffold(tmp_path / "my-op", "my-op", ["cpu"])
    assert [p.name for p in tmp_path.iterdir()] == ["my-op"] and list((tmp_path / "my-op").iterdir()) == []


def test_templates_dir_points_at_the_checkout():
    assert (templates_dir("init", "common") / "build.toml.j2").is_file()
    assert (templates_dir("build") / "registration.h").is_file()


# -- the generated CPU source, compiled for real --------------------------------------


@pytest.mark.e2e
def test_real_compile_of_generated_cpu_source_matches_reference(tmp_path):
    """REAL COMPILE (30-60 s): g++ builds the scaffolded binding + CPU unit with the CPU
    variant's defines, then the op, the functional API and the layer are checked."""
    import torch
    from torch.utils import cpp_extension

    root, _ = render(tmp_path, ["cpu"], name="scaffold-compile-check")
    ns = "_kbuild_scaffold_compile_check"
    build_dir = tmp_path / "torch-build"
    build_dir.mkdir()
    cpp_extension.load(
        name=ns,
        sources=[str(root / "torch-ext" / "torch_binding.cpp"), str(root / "scaffold_compile_check_cpu" / "scale_add.cpp")],
        extra_include_paths=[str(templates_dir("build")), str(root)],
        extra_cflags=["-O3", "-fopenmp", "-DCPU_KERNEL", f"-DTORCH_EXTENSION_NAME={ns}", "-D_GLIBCXX_USE_CXX11_ABI=1"],
        extra_ldflags=["-fopenmp"],
        build_directory=str(build_dir),
        is_python_module=False,
        verbose=False,
    )
    op = getattr(torch.ops, ns).scale_add
    torch.manual_seed(0)

    # The raw op, every dtype, small and large (the OpenMP path), against a float64 reference.
    for dtype, tol in ((torch.float32, 1e-6), (torch.float64, 1e-12), (torch.bfloat16, 1e-2), (torch.float16, 1e-3)):
        for n in (1, 1000, 1 << 18):
            x, y = torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype)
            out = torch.empty_like(x)
            op(out, x, y, -1.5)
            expected = (x.double() - 1.5 * y.double()).to(dtype)
            torch.testing.assert_close(out, expected, atol=tol, rtol=tol)

    # Strided inputs and a strided out.
    x, y = torch.randn(40, 30).t(), torch.randn(30, 40)
    out = torch.empty(40, 30).t()
    op(out, x, y, 2.0)
    torch.testing.assert_close(out, x + 2.0 * y)

    with pytest.raises(RuntimeError, match="same shape"):
        op(torch.empty(3), torch.randn(3), torch.randn(4), 1.0)
    with pytest.raises(RuntimeError, match="same dtype"):
        op(torch.empty(3), torch.randn(3), torch.randn(3, dtype=torch.float64), 1.0)

    # The generated Python package, with the _ops.py the build would generate.
    package = root / "torch-ext" / "scaffold_compile_check"
    (package / "_ops.py").write_text(f"import torch\n\nops = torch.ops.{ns}\n")
    module = _import_package(package, "kbuild_scaffold_compile_check_pkg")
    x, y = torch.randn(257), torch.randn(257)
    torch.testing.assert_close(module.scale_add(x, y, 0.25), x + 0.25 * y)
    out = torch.empty(257)
    assert module.scale_add(x, y, 3.0, out=out) is out
    torch.testing.assert_close(out, x + 3.0 * y)

    class Reference(torch.nn.Module):
        alpha = 0.5

        def forward(self, x, y):
            return x + self.alpha * y

    torch.testing.assert_close(module.layers.ScaleAdd.forward(Reference(), x, y), Reference()(x, y))


# -- helpers ---------------------------------------------------------------------------


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _import_package(package: Path, module_name: str):
    spec = importlib.util.spec_from_file_location(module_name, package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module
