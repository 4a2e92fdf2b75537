"""`kbuild init` + `kbuild build` + the generated tests, and `kbuild demo`, for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib

import pytest

from conftest import kbuild, kbuild_in_process
from git_repo import git, new_repo
from kernel_builder.checks.kernel_benchmarks import KERNELS_CLI
from kernel_builder.pipeline.plan import kernel_work_root
from kernel_builder.compile.backends.cuda import nvcc_path
from kernel_builder.errors import KbuildError
from kernel_builder.kernel.manifest import load_manifest
from kernel_builder.scaffold.demo import demo_kernel
from kernel_builder.scaffold.new_kernel import scaffold


def test_init_all_backends_writes_every_source(tmp_path):
    files = {p.relative_to(tmp_path / "k").as_posix() for p in scaffold(tmp_path / "k", "my-op", ["cpu", "cuda", "rocm", "metal", "xpu"])}
    for rel in ("build.toml", ".gitignore", ".gitattributes", "README.md", "tests/test_my_op.py", "benchmarks/benchmark.py",
                "torch-ext/my_op/__init__.py",
                "torch-ext/my_op/layers.py", "my_op_cpu/scale_add.cpp", "my_op_cuda/scale_add_kernel.cu", "my_op_metal/scale_add.metal",
                "my_op_xpu/scale_add.cpp"):
        assert rel in files, rel
    toml = tomllib.loads((tmp_path / "k" / "build.toml").read_text())
    assert set(toml["kernel"]) == {f"my_op_{b}" for b in ("cpu", "cuda", "rocm", "metal", "xpu")}
    assert "*.so filter=lfs" in (tmp_path / "k" / ".gitattributes").read_text()


@pytest.mark.parametrize("name,backends,words", [
    ("Bad_Name", ["cpu"], "kebab-case"), ("k", ["cpu"], "2 or more"), ("ok", ["tpu"], "unknown backend 'tpu'")])
def test_init_rejects_bad_input_and_writes_nothing(tmp_path, name, backends, words):
    with pytest.raises(KbuildError, match=words):
        scaffold(tmp_path / "k", name, backends)
    assert list(tmp_path.iterdir()) == []


def test_init_refuses_an_existing_folder(tmp_path):
    (tmp_path / "kk").mkdir()
    (tmp_path / "kk" / "x").write_text("")
    result = kbuild_in_process("init", "kk", cwd=tmp_path)
    assert result.returncode == 1 and "already exists" in result.stderr


@pytest.mark.e2e
def test_init_then_build_then_generated_tests_pass(tmp_path):
    kbuild("init", "demo", "--backends", "cpu,cuda", cwd=tmp_path, check=True)
    # One capability: the template's default eleven cost minutes of device compiles on two cores
    # and are checked without compiling (tests/compile/test_cuda.py); the generated tests run on the CPU.
    result = kbuild("build", "demo", "--json", "--cuda-arch", "9.0", cwd=tmp_path, check=True)
    rows = {r["backend"]: r for r in json.loads(result.stdout)["jobs"]}
    assert rows["cpu"]["status"] == "built"
    if nvcc_path():  # both variants build here: CPU with this torch, CUDA in its managed environment
        assert rows["cuda"]["status"] == "built" and rows["cuda"]["variant"].endswith("-cu130-x86_64-linux")
        assert (tmp_path / "demo" / "build" / rows["cuda"]["variant"] / "metadata.json").is_file()
    else:
        assert rows["cuda"]["status"] == "skipped" and "nvcc" in rows["cuda"]["detail"]
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "demo/tests"],
                           cwd=tmp_path, capture_output=True, text=True, check=False)
    assert tests.returncode == 0 and "12 passed" in tests.stdout, tests.stdout[-2000:]

    # The template's benchmark on this CPU build: kernels 0.19.1's own CLI, then `kbuild bench`
    # (the build is up to date: it only runs them).
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    theirs = subprocess.run([sys.executable, "-c", KERNELS_CLI, "benchmark", "./demo", "--iterations", "3", "--warmup", "1"],
                            cwd=tmp_path, capture_output=True, text=True, env=env, check=False)
    assert theirs.returncode == 0 and "DemoBenchmark" in theirs.stderr and "✗" not in theirs.stderr, theirs.stderr[-3000:]
    (library,) = (tmp_path / "demo" / "build" / rows["cpu"]["variant"]).glob("*.so")
    built_at = library.stat().st_mtime_ns
    ours = kbuild("bench", "demo", "--json", "--iterations", "3", "--warmup", "1", cwd=tmp_path, env=env)
    assert ours.returncode == 0, ours.stderr[-3000:]
    data = json.loads(ours.stdout)
    assert data["variant"] == rows["cpu"]["variant"] and library.stat().st_mtime_ns == built_at
    assert {r["workload"]: r["verified"] for r in data["results"]} == {"DemoBenchmark.fp32": True, "DemoBenchmark.bf16": True}
    print(theirs.stderr, "\n".join(f"{r['workload']}: {r['timingResults']['mean_ms']} ms" for r in data["results"]))


@pytest.mark.e2e
def test_demo_command_shows_its_build_and_reuses_it(tmp_path):
    first = kbuild("demo", "--dir", str(tmp_path), check=True)
    assert "matches x + 0.5 * y" in first.stdout and "scaffolded" in first.stdout
    assert "torch213-cxx11-cpu-x86_64-linux compile" in first.stderr  # the build's progress, as `kbuild build` shows it
    second = kbuild("demo", "--dir", str(tmp_path), check=True)
    assert "reusing" in second.stdout and "up to date:" in second.stdout and "matches x + 0.5 * y" in second.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["kbuild-demo"]


def test_demo_kernel_is_reused_while_it_is_what_kbuild_scaffolds(tmp_path):
    root, reused = demo_kernel(tmp_path)
    assert not reused and (root / "build.toml").is_file()
    (root / "build" / "marker").parent.mkdir()
    (root / "build" / "marker").write_text("a previous build")
    assert demo_kernel(tmp_path) == (root, True) and (root / "build" / "marker").is_file()
    (root / "build.toml").write_text((root / "build.toml").read_text() + "\n# changed\n")
    assert demo_kernel(tmp_path) == (root, False)  # not what kbuild writes: written afresh
    assert "# changed" not in (root / "build.toml").read_text() and not (root / "build").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["kbuild-demo"]  # no staging folders left


def test_demo_kernel_leaves_no_staging_folder_when_interrupted(tmp_path, monkeypatch):
    import kernel_builder.scaffold.demo as demo

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        demo_kernel(tmp_path)
    assert list(tmp_path.iterdir()) == []




def _cpu_row(root) -> dict:
    rows = json.loads(kbuild("build", str(root), "--json", check=True).stdout)["jobs"]
    return next(r for r in rows if r["backend"] == "cpu")


def _objects(root) -> dict:
    """The CPU work tree's object files and their modification times: what a recompile rewrites."""
    work = kernel_work_root(load_manifest(root))
    return {p: p.stat().st_mtime_ns for p in work.rglob("*.o")}


@pytest.mark.e2e
def test_commits_that_touch_no_input_keep_the_build_and_it_stays_publishable(tmp_path):
    """The issue's repro: build before the first commit, commit, build, README-only commit,
    build, publish --dry-run; the only compile is the first build."""
    kbuild("init", "my-op", "--no-git", cwd=tmp_path, check=True)
    root = tmp_path / "my-op"
    assert _cpu_row(root)["status"] == "built"
    (library,) = root.glob("build/*/_my_op_cpu_*.abi3.so")
    objects = _objects(root)
    assert objects, "the first build compiled object files"

    new_repo(root, "scaffold")
    # Same sources, same id: the variant is stamped again with its commit, nothing compiles.
    assert _cpu_row(root)["status"] == "built" and _objects(root) == objects
    (variant,) = (root / "build").iterdir()
    metadata = json.loads((variant / "metadata.json").read_text())
    assert metadata["id"] == library.name.removesuffix(".abi3.so") and metadata["provenance"]["kernel"]["dirty"] is False

    (root / "README.md").write_text((root / "README.md").read_text() + "\nMore words.\n")
    git(root, "commit", "-q", "-am", "docs")
    assert _cpu_row(root)["status"] == "up-to-date" and library.is_file()
    dry = kbuild("publish", str(root), "--tag", "v1.0.0", "--repo-id", "org/my-op", "--dry-run")
    assert dry.returncode == 0 and "would publish org/my-op" in dry.stdout, dry.stderr

    source = root / "my_op_cpu" / "scale_add.cpp"
    source.write_text(source.read_text() + "// changed\n")
    git(root, "commit", "-q", "-am", "edit")
    stale = kbuild("publish", str(root), "--tag", "v1.0.0", "--repo-id", "org/my-op", "--dry-run")
    assert stale.returncode == 1 and "build/ does not match the source" in stale.stderr
