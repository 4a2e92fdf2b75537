"""[tvm-ffi] `kbuild build`, before anything compiles: options of the torch pipeline are refused in
one line, and a machine where apache-tvm-ffi cannot be installed skips every backend with pip's
reason (a test double for the index: the registry is reachable on this machine)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import kbuild_in_process

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tvm-ffi-relu"


@pytest.fixture
def kernel(tmp_path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / "tvm-ffi-relu"))


@pytest.mark.parametrize("args, said", [
    (["--matrix", "all"], "--matrix does not apply to a [tvm-ffi] kernel"),
    (["--cuda-arch", "9.0"], "--cuda-arch does not apply to a [tvm-ffi] kernel"),
    (["--variant-names", "new"], "--variant-names new: kernel-builder names [tvm-ffi] variants in the legacy style only"),
])
def test_torch_pipeline_options_are_refused_in_one_line(kernel, args, said):
    result = kbuild_in_process("build", str(kernel), *args)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and said in lines[0], result.stderr
    assert not (kernel / "build").exists()


def test_no_apache_tvm_ffi_skips_every_backend_with_the_reason(kernel, monkeypatch):
    from kernel_builder.environments.runtime_overlay import RuntimeEnvError
    from kernel_builder.pipeline import build_tvm_ffi

    def unreachable(*args):
        raise RuntimeEnvError("apache-tvm-ffi: No matching distribution found")

    monkeypatch.setattr(build_tvm_ffi, "find_toolchain", unreachable)
    result = kbuild_in_process("build", str(kernel))
    assert result.returncode == 1
    assert "apache-tvm-ffi is not usable here: apache-tvm-ffi: No matching distribution found" in " ".join(result.stdout.split())
    assert result.stderr.strip().splitlines()[-1] == (
        "kbuild: error: nothing to build for 'tvm-ffi-relu' on this machine: every backend was skipped"
    )


@pytest.mark.parametrize("command", ["test", "dev", "plan"])
def test_the_torch_pipelines_commands_refuse_it_in_one_line(kernel, command):
    (kernel / "tests").mkdir()
    (kernel / "tests" / "test_relu.py").write_text("def test_nothing():\n    pass\n")
    result = kbuild_in_process(command, str(kernel))
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "[tvm-ffi]: only `kbuild build` builds this framework so far" in lines[0]
