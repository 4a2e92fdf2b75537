"""One build's options (kernel_builder.pipeline.options.BuildOptions) and kbuild's environment
variables (kernel_builder.settings): one name and one default per option, variables read in
one place, bad values refused in one line naming the flag or variable. In-process, no build."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kernel_builder
from kernel_builder import settings
from kernel_builder.pipeline.options import BuildOptions
from kernel_builder.checks.variant_checks import check_variant
from kernel_builder.cli.build import build
from kernel_builder.cli.main import app
from kernel_builder.compile.compiler_cache import find_compiler_cache
from kernel_builder.compile.parallelism import compile_parallelism
from kernel_builder.environments.store import EnvSpec, envs_root, pip_request
from kernel_builder.errors import KbuildError
from kernel_builder.paths import cache_dir
from kernel_builder.runners.docker import default_compiler_cache_dir
from kernel_builder.runners.base import BuildSettings
from kernel_builder.settings import KbuildEnvironment, read_environment

PACKAGE = Path(kernel_builder.__file__).parent
# `kbuild build`'s parameters that are not options of the build itself.
_NOT_BUILD_OPTIONS = {"kernel_dir", "as_json"}
_CLI_NAME = {"variant": "variants"}  # --variant is repeatable: the option holds them all
_VARIABLES = ("CACHE_DIR", "XDG_CACHE_HOME", "ENVS_DIR", "TORCH_INDEX", "COMPILER_CACHE", "CCACHE_DIR",
              "SCCACHE_DIR", "CCACHE_BASEDIR", "MAX_JOBS", "NVCC_THREADS")


def _field_names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _one_line_error(error: pytest.ExceptionInfo, *words: str) -> None:
    message = error.value.message
    assert "\n" not in message and all(w in message for w in words), message
    assert error.value.exit_code == 2


# -- BuildOptions ------------------------------------------------------------------------
def test_defaults():
    options = BuildOptions()
    assert options.variants == () and options.matrix is None and options.out is None
    assert options.import_check is True and options.strict_abi is False and options.fail_fast is False
    assert options.create_env is True and options.compiler_cache is None and options.runner == "local"
    assert options.jobs is options.max_jobs is options.nvcc_threads is None


def test_every_build_flag_is_one_option_with_the_same_name_and_default():
    flags = {
        _CLI_NAME.get(name, name): parameter.default.default
        for name, parameter in inspect.signature(build).parameters.items() if name not in _NOT_BUILD_OPTIONS
    }
    assert set(flags) == _field_names(BuildOptions)
    defaults = BuildOptions()
    for name, default in flags.items():
        assert (default or ()) == (getattr(defaults, name) or ()), name  # --variant's None is ()


def test_the_stages_use_the_options_names():
    shared = {"import_check", "strict_abi", "compiler_cache"}
    assert shared <= _field_names(BuildSettings) and shared <= _field_names(BuildOptions)
    assert {"import_check", "strict_abi"} <= set(inspect.signature(check_variant).parameters)
    # The old names are gone from the builder (the runtime's check_variant is another one).
    for path in PACKAGE.rglob("*.py"):
        if "runtime" not in path.parts:
            assert not re.search(r"\b(smoke_test|portable_abi)\b", path.read_text()), path


def test_options_are_frozen_and_take_a_list_of_variants():
    options = BuildOptions(variants=["torch213-cxx11-cpu-x86_64-linux"])
    assert options.variants == ("torch213-cxx11-cpu-x86_64-linux",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.jobs = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    "given, words",
    [
        ({"jobs": 0}, ["--jobs", "at least 1", "0"]),
        ({"max_jobs": -2}, ["--max-jobs", "-2"]),
        ({"nvcc_threads": 0}, ["--nvcc-threads"]),
        ({"runner": "podman"}, ["--runner", "local, docker", "'podman'"]),
        ({"variant_names": "old"}, ["--variant-names", "'legacy' or 'new'"]),
        ({"matrix": "all", "variants": ("torch213-cxx11-cpu-x86_64-linux",)}, ["--matrix", "--variant"]),
    ],
)
def test_a_bad_option_is_one_line_naming_its_flag(given, words):
    with pytest.raises(KbuildError) as error:
        BuildOptions(**given)
    _one_line_error(error, *words)


def test_kbuild_build_refuses_a_bad_flag_before_any_work(tmp_path):
    """The kernel folder does not exist: the flag's error comes first."""
    result = CliRunner().invoke(app, ["build", str(tmp_path / "missing"), "--jobs", "0"])
    assert isinstance(result.exception, KbuildError), result.output
    assert "--jobs must be a whole number of at least 1" in result.exception.message


# -- the environment variables -------------------------------------------------------------
@pytest.fixture
def clean_environment(monkeypatch):
    for constant in _VARIABLES:
        monkeypatch.delenv(getattr(settings, constant), raising=False)
    return monkeypatch


def test_unset_variables_are_none(clean_environment):
    assert read_environment() == KbuildEnvironment()
    environment = read_environment()
    assert environment.compiler_cache is environment.max_jobs is environment.nvcc_threads is None


def test_variables_are_read_typed(clean_environment, tmp_path):
    for name, value in {
        "KBUILD_CACHE_DIR": str(tmp_path / "cache"), "KBUILD_ENVS_DIR": str(tmp_path / "envs"),
        "KBUILD_TORCH_INDEX": "https://mirror.example/torch", "KBUILD_COMPILER_CACHE": " SCCache ",
        "SCCACHE_DIR": str(tmp_path / "sc"), "CCACHE_BASEDIR": "/home", "MAX_JOBS": "3", "NVCC_THREADS": "2",
    }.items():
        clean_environment.setenv(name, value)
    environment = read_environment()
    assert environment.cache_dir == tmp_path / "cache" and environment.envs_dir == tmp_path / "envs"
    assert environment.torch_index == "https://mirror.example/torch" and environment.ccache_basedir == "/home"
    assert environment.compiler_cache == "sccache" and environment.tool_cache_dir("sccache") == tmp_path / "sc"
    assert environment.tool_cache_dir("ccache") is None
    assert (environment.max_jobs, environment.nvcc_threads) == (3, 2)
    # The modules that use them read the same values.
    assert cache_dir("x") == tmp_path / "cache" / "x" and envs_root() == tmp_path / "envs"
    assert pip_request(EnvSpec((2, 13), "cpu"))[1] == "https://mirror.example/torch"
    assert compile_parallelism(cores=8, memory=None).jobs == 3
    assert default_compiler_cache_dir(True) == tmp_path / "cache" / "ccache"  # the containers use ccache


def test_empty_variables_count_as_unset(clean_environment):
    for constant in _VARIABLES:
        clean_environment.setenv(getattr(settings, constant), "")
    assert read_environment() == KbuildEnvironment()


def test_an_explicit_mapping_is_read_instead_of_os_environ(clean_environment):
    assert read_environment({"MAX_JOBS": "4", "KBUILD_COMPILER_CACHE": "auto"}).max_jobs == 4
    assert read_environment({"KBUILD_COMPILER_CACHE": "auto"}).compiler_cache is None
    assert read_environment().max_jobs is None


@pytest.mark.parametrize(
    "name, value, read",
    [
        ("MAX_JOBS", "many", lambda: compile_parallelism()),
        ("NVCC_THREADS", "0", lambda: compile_parallelism()),
        ("KBUILD_COMPILER_CACHE", "distcc", lambda: find_compiler_cache()),
    ],
)
def test_a_bad_variable_is_one_line_naming_it_where_it_is_used(clean_environment, tmp_path, name, value, read):
    clean_environment.setenv("KBUILD_CACHE_DIR", str(tmp_path))
    clean_environment.setenv(name, value)
    read_environment()  # reading does not fail: only a build that needs the value does
    cache_dir("venvs")  # so `kbuild env list` and `kbuild doctor` still work
    with pytest.raises(KbuildError) as error:
        read()
    _one_line_error(error, name, repr(value))


def test_a_flag_wins_over_its_variable(clean_environment):
    clean_environment.setenv("MAX_JOBS", "7")
    clean_environment.setenv("NVCC_THREADS", "nonsense")  # not read: the flag is given
    assert compile_parallelism(jobs=2, nvcc_threads=1, cores=8, memory=None).jobs == 2


def test_the_builder_reads_its_variables_only_in_settings():
    names = "|".join(getattr(settings, constant) for constant in _VARIABLES)
    read = re.compile(rf"""(environ\.get\(|environ\[|getenv\()\s*f?["']({names})["']""")
    for path in PACKAGE.rglob("*.py"):
        if path.name != "settings.py" and "runtime" not in path.parts:
            assert not read.search(path.read_text()), path
