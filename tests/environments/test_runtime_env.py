"""kernel_builder.environments.runtime_overlay: what a kernel needs at import time, read from build.toml or a
built variant by one scanner, and the cached overlay interpreter that has it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import optional_module
from kernel_builder.kernel.manifest import load_manifest
from kernel_builder.environments.runtime_overlay import (
    RuntimeEnvError, triton_for_torch, kernel_runtime_needs, runtime_python, variant_runtime_needs,
)

torch = optional_module("torch")

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_needs_are_python_depends_plus_third_party_imports(tmp_path):
    needs = kernel_runtime_needs(load_manifest(FIXTURES / "noarch-needs"), "cuda")
    assert needs.packages == ("einops", "triton")
    assert dict(needs.why)["triton"] == "torch-ext/noarch_needs/_scale.py imports triton"
    # A built variant: the same scan over its files, python-depends from metadata.json;
    # an import guarded by `except ImportError` is optional, not a need.
    folder = tmp_path / "torch-cuda"
    (folder / "pkg").mkdir(parents=True)
    (folder / "pkg" / "__init__.py").write_text(
        "import os, torch, requests\nfrom . import x\ntry:\n    import triton\nexcept ImportError:\n    triton = None\n"
    )
    needs = variant_runtime_needs(folder, {"name": "pkg", "python-depends": ["tvm-ffi", "nvidia-cutlass-dsl"]})
    # At kernel-builder's newest pins where the variant's stamp records none (python_pins).
    assert needs.packages == ("apache-tvm-ffi==0.1.9", "nvidia-cutlass-dsl==4.6.1", "requests")
    stamped = {"name": "pkg", "python-depends": ["nvidia-cutlass-dsl"], "kbuild": {"python-pins": {"nvidia-cutlass-dsl": "4.5.0"}}}
    assert variant_runtime_needs(folder, stamped).packages == ("nvidia-cutlass-dsl==4.5.0", "requests")


def test_an_import_no_known_distribution_provides_is_named_never_installed_by_its_name(tmp_path):
    """An index serves whatever is called `x`, often not what provides the module `x`: a
    kernel's import is installed only as the distribution known to provide it (attr: attrs);
    any other name is unresolved, and named where the interpreter lacks it too."""
    folder = tmp_path / "torch-cpu"
    (folder / "pkg").mkdir(parents=True)
    (folder / "pkg" / "__init__.py").write_text("import attr\nimport kbuild_fixture_squattable\nimport apex\nimport _pytest\n")
    needs = variant_runtime_needs(folder, {"name": "pkg"})
    assert needs.packages == ("attrs",)
    assert sorted(module for module, _ in needs.unresolved) == ["_pytest", "apex", "kbuild_fixture_squattable"]
    unmet = dict(needs.unmet_imports(sys.executable))  # this interpreter has _pytest (from pytest)
    assert sorted(unmet) == ["apex", "kbuild_fixture_squattable"]
    assert unmet["kbuild_fixture_squattable"] == (
        "pkg/__init__.py imports kbuild_fixture_squattable: no distribution is known to provide "
        "kbuild_fixture_squattable, so none is guessed; install it into the build environment to use it")
    assert "built from source" in unmet["apex"]


@pytest.mark.e2e
@pytest.mark.creates_env
def test_the_overlay_is_made_once_sees_torch_and_its_packages():
    # The same key as the noarch build tests' import check: one creation per session.
    first = runtime_python(sys.executable, ["triton", "einops"])
    start = time.perf_counter()
    again = runtime_python(sys.executable, ["einops", "triton"])
    assert again == first and time.perf_counter() - start < 5
    probe = "import torch, triton, einops, sys; print(torch.__file__); print(sys.prefix); print(triton.__version__)"
    out = subprocess.run([first, "-c", probe], capture_output=True, text=True, check=True).stdout
    torch_file, prefix, triton_version = out.split()
    assert torch_file.startswith(sys.prefix)  # the base's torch, not a second one
    assert Path(prefix) == Path(first).parent.parent
    # The triton torch's own CUDA wheel requires (matrix.toml), not pip's newest.
    torch_minor = ".".join(torch.__version__.split(".")[:2])
    assert triton_version == triton_for_torch()[torch_minor]
    assert runtime_python(sys.executable, []) == sys.executable


@pytest.mark.e2e
@pytest.mark.creates_env
def test_a_package_no_index_has_is_a_one_line_error():
    with pytest.raises(RuntimeEnvError) as error:
        runtime_python(sys.executable, ["kbuild-fixture-module-no-index-has"])
    assert "\n" not in error.value.message
    assert error.value.message.startswith("could not install kbuild-fixture-module-no-index-has")
    assert "No matching distribution found" in error.value.message


@pytest.mark.e2e
@pytest.mark.creates_env
def test_env_list_and_prune_know_the_overlays(tmp_path, monkeypatch):
    """Overlays (about 1 GB with triton) are listed and pruned like build environments; one
    whose base interpreter is gone cannot run and always goes."""
    import json
    import os

    from typer.testing import CliRunner

    from kernel_builder.cli.env import env_app

    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KBUILD_ENVS_DIR", str(tmp_path / "envs"))
    python = Path(runtime_python(sys.executable, ["einops"]))
    overlay = python.parent.parent
    orphan = overlay.with_name("0123456789abcdef")
    (orphan / "bin").mkdir(parents=True)
    (orphan / "ready").write_text(json.dumps({"base": str(tmp_path / "gone" / "python"), "packages": ["x"]}))
    runner = CliRunner()

    rows = {row["key"]: row for row in json.loads(runner.invoke(env_app, ["list", "--json"]).stdout)}
    assert rows[overlay.name]["packages"] == ["einops"] and rows[overlay.name]["complete"]
    assert rows[overlay.name]["size_bytes"] > 0 and not rows[orphan.name]["complete"]
    assert "runtime overlays" in runner.invoke(env_app, ["list"]).stdout

    pruned = json.loads(runner.invoke(env_app, ["prune", "--json"]).stdout)
    assert [row["key"] for row in pruned] == [orphan.name] and not orphan.exists() and overlay.is_dir()
    assert json.loads(runner.invoke(env_app, ["prune", "--older-than", "2", "--json"]).stdout) == []
    old = time.time() - 3 * 86400
    os.utime(overlay / "ready", (old, old))
    pruned = json.loads(runner.invoke(env_app, ["prune", "--older-than", "2", "--json"]).stdout)
    assert [row["key"] for row in pruned] == [overlay.name] and not overlay.exists()
