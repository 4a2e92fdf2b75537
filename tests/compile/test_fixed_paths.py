"""The fixed compile paths of a shared compiler cache: one folder per kernel and variant
whose links name the checkout, the work tree and the environment, and whose CUDA units are
real files, so every runner's compile commands name the same paths."""

from __future__ import annotations

import os
from pathlib import Path
from dataclasses import replace
from types import SimpleNamespace

import pytest

from kernel_builder.compile import fixed_paths
from kernel_builder.compile.cmake import CompileSpec, SourceGroup
from kernel_builder.compile.fixed_paths import CompilePaths, fixed_compile_paths, real_paths
from kernel_builder.compile.job_folders import reproducible, runner_folders
from kernel_builder.environments import cutlass_headers
from kernel_builder.errors import BuildError


@pytest.fixture
def job(tmp_path, monkeypatch):
    """A job's folders in tmp_path, the fixed root in tmp_path/fixed."""
    monkeypatch.setattr(fixed_paths, "ROOT_PARENT", tmp_path / "fixed")
    (tmp_path / "fixed").mkdir()
    checkout, work = tmp_path / "runner" / "relu", tmp_path / "cache" / "work" / "v"
    site = tmp_path / "env" / "site-packages"
    for folder in (checkout / "relu_cuda", work, site / "torch", tmp_path / "py" / "include"):
        folder.mkdir(parents=True)
    return SimpleNamespace(
        manifest=SimpleNamespace(python_name="relu", root=checkout),
        work_dir=work,
        env=SimpleNamespace(torch_dir=str(site / "torch"), python_include=str(tmp_path / "py" / "include")),
        variant=SimpleNamespace(name="torch214-cxx11-cu130-x86_64-linux"),
    )


def spec_of(job) -> CompileSpec:
    root = job.manifest.root
    cu, cpp = f"{root}/relu_cuda/relu.cu", f"{root}/torch-ext/torch_binding.cpp"
    return CompileSpec(
        target="_relu", suffix=".abi3.so", languages=("CXX", "CUDA"),
        groups=(SourceGroup((cu,), options=("-O3",)), SourceGroup((cpp,))),
        includes=(f"{job.work_dir}/generated", str(root), f"{job.env.torch_dir}/include", job.env.python_include),
        system_includes=(f"{Path(job.env.torch_dir).parent}/nvidia/cu13/include", "/usr/local/cuda/include"),
        link_dirs=(f"{job.env.torch_dir}/lib",),
        options=(f"-I{root}bis", f"--flag={root}/x"),  # a sibling folder with the same prefix is not the checkout
        source_order=(cpp, cu),
    )


def test_the_project_names_only_the_fixed_folder_and_cuda_units_are_real_files(job):
    with fixed_compile_paths(job) as paths:
        folder = paths.work_dir.parent
        assert folder == fixed_paths.ROOT_PARENT / f"kbuild-{os.getuid()}" / "compile" / "relu" / job.variant.name
        assert (folder / "kernel").resolve() == job.manifest.root.resolve()
        assert (folder / "work").resolve() == job.work_dir.resolve()
        assert (folder / "site-packages").resolve() == Path(job.env.torch_dir).parent.resolve()
        # CUTLASS's headers (a unit's depends) are read through the fixed folder too.
        assert (folder / "cutlass").resolve() == cutlass_headers.tools_root().resolve()
        cutlass = cutlass_headers.tools_root() / "4.0.0-0123456789abcdef" / "include"
        assert paths.apply(replace(spec_of(job), includes=(str(cutlass),))).includes == (f"{folder}/cutlass/4.0.0-0123456789abcdef/include",)
        spec = paths.apply(spec_of(job))
        unit = folder / "units" / "relu_cuda" / "relu.cu"
        assert spec.groups[0] == SourceGroup((str(unit),), options=("-O3",))
        assert spec.groups[1].files == (f"{folder}/kernel/torch-ext/torch_binding.cpp",)
        assert spec.source_order == (f"{folder}/kernel/torch-ext/torch_binding.cpp", str(unit))
        # nvcc resolves links for the file it compiles: the unit is a real file that
        # includes the kernel's through the link.
        assert not unit.is_symlink() and f'#include "{folder}/kernel/relu_cuda/relu.cu"' in unit.read_text()
        assert spec.includes == (f"{folder}/work/generated", f"{folder}/kernel", f"{folder}/site-packages/torch/include",
                                 f"{folder}/python")
        assert spec.system_includes == (f"{folder}/site-packages/nvidia/cu13/include", "/usr/local/cuda/include")
        assert spec.link_dirs == (f"{folder}/site-packages/torch/lib",)
        assert spec.options == (f"-I{job.manifest.root}bis", f"--flag={folder}/kernel/x")
        assert paths.real(folder / "work" / "build" / "_relu.abi3.so") == job.work_dir.resolve() / "build" / "_relu.abi3.so"


def test_the_prefix_maps_name_only_the_fixed_folder(job):
    """The -ffile-prefix-map flags (job_folders.reproducible) are part of every compile's cache
    key: through fixed paths they name the fixed folder only, never the runner's own."""
    with fixed_compile_paths(job) as paths:
        folder = paths.work_dir.parent
        spelled = dict(paths.compiled(runner_folders(job)))
        assert spelled == {f"{folder}/{name}": name for name in ("kernel", "work", "kbuild-templates", "cutlass", "site-packages", "python", "units")}
        options = dict(reproducible(spec_of(job), paths.compiled(runner_folders(job))).language_options)
        assert all(f"={folder}/" in o and str(job.manifest.root) not in o for o in options["CXX"])


def test_without_a_shared_cache_the_spec_is_left_as_it_is(job):
    spec = spec_of(job)
    paths = real_paths(job)
    assert paths.apply(spec) is spec and paths.work_dir == job.work_dir
    assert paths.real(job.work_dir / "x") == job.work_dir / "x"


def test_a_second_job_of_the_same_variant_takes_the_next_folder_and_the_first_is_reused(job, tmp_path):
    other = SimpleNamespace(**{**vars(job), "work_dir": tmp_path / "cache2" / "work" / "v"})
    other.work_dir.mkdir(parents=True)
    with fixed_compile_paths(job) as first:
        with fixed_compile_paths(other) as second:
            assert second.work_dir.parent.name == f"{job.variant.name}.2"
            assert second.work_dir.resolve() == other.work_dir.resolve()
        assert first.work_dir.resolve() == job.work_dir.resolve()  # not re-pointed under the first job
    with fixed_compile_paths(other) as again:
        assert again.work_dir.parent.name == job.variant.name  # free again: re-pointed
        assert again.work_dir.resolve() == other.work_dir.resolve()


def test_a_root_that_others_may_write_is_refused_in_one_line(job):
    root = fixed_paths.ROOT_PARENT / f"kbuild-{os.getuid()}"
    root.mkdir()
    root.chmod(0o777)
    with pytest.raises(BuildError, match="not a folder of this user's alone.*remove it"):
        with fixed_compile_paths(job):
            pass
    root.rmdir()
    root.symlink_to(fixed_paths.ROOT_PARENT.parent)
    with pytest.raises(BuildError, match="not a folder of this user's alone"):
        with fixed_compile_paths(job):
            pass


def test_a_real_folder_or_file_where_a_link_goes_is_replaced_when_it_is_this_users(job):
    """A crashed build, an older kbuild or a hand left a real folder or file where kbuild
    keeps a link: it was an IsADirectoryError/FileExistsError traceback on every build."""
    folder = fixed_paths.ROOT_PARENT / f"kbuild-{os.getuid()}" / "compile" / "relu" / job.variant.name
    folder.mkdir(parents=True)
    (folder / "work" / "sub").mkdir(parents=True)
    (folder / "work" / "sub" / "old.o").write_text("stale")
    (folder / "kernel").write_text("stale")
    with fixed_compile_paths(job) as paths:
        assert (folder / "work").is_symlink() and paths.work_dir.resolve() == job.work_dir.resolve()
        assert (folder / "kernel").is_symlink() and (folder / "kernel").resolve() == job.manifest.root.resolve()


def test_a_real_folder_of_another_user_where_a_link_goes_is_refused_in_one_line(job):
    if os.geteuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    folder = fixed_paths.ROOT_PARENT / f"kbuild-{os.getuid()}" / "compile" / "relu" / job.variant.name
    (folder / "work").mkdir(parents=True)
    os.chown(folder / "work", 65534, 65534)
    with pytest.raises(BuildError, match=rf"^{folder / 'work'} is not this user's, .*; remove it and build again$"):
        with fixed_compile_paths(job):
            pass
    assert (folder / "work").is_dir() and not (folder / "work").is_symlink()


def test_a_path_is_rewritten_only_at_a_folder_boundary():
    paths = CompilePaths(Path("/f/work"), (("/a/b", "/f/kernel"),), None, None)
    spec = CompileSpec(target="t", suffix=".so", languages=("CXX",), groups=(),
                       options=("/a/b", "/a/b/c", "/a/bc", "-I/a/b/d", "x=/a/b;/a/b/e"))
    assert paths.apply(spec).options == ("/f/kernel", "/f/kernel/c", "/a/bc", "-I/f/kernel/d", "x=/f/kernel;/f/kernel/e")


def test_a_checkout_reached_through_a_link_is_mapped_in_either_spelling(job, tmp_path):
    (tmp_path / "alias").symlink_to(job.manifest.root)
    linked = SimpleNamespace(**{**vars(job), "manifest": SimpleNamespace(python_name="relu", root=tmp_path / "alias")})
    with fixed_compile_paths(linked) as paths:
        folder = paths.work_dir.parent
        spec = CompileSpec(target="t", suffix=".so", languages=("CXX",), groups=(),
                           includes=(str(tmp_path / "alias"), str(job.manifest.root.resolve())))
        assert paths.apply(spec).includes == (f"{folder}/kernel", f"{folder}/kernel")
