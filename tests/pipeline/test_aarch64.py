"""aarch64-linux CPU variants cross-built on this x86_64 machine (docs/guides/aarch64.md):
examples/swiglu and examples/layer-norm build torch214-cxx11-cpu-aarch64-linux, pass `kbuild
check` with the import in the emulated aarch64 Python, pass their own tests under emulation,
and load with kernels 0.19.1's own loader there, which picks the aarch64 variant, as kbuild's
runtime does.

Every emulated process costs a torch import under qemu (tens of seconds to minutes on CI's
two cores): the builds are made once per run (made_once), and each test runs as few emulated
processes as it can. torch's aarch64 environment and the emulated Python live in the suite's
store (KBUILD_ENVS_DIR), so a second run on the same machine downloads nothing."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, copy_example, kbuild, made_once
from kernel_builder.environments import emulation_root
from kernel_builder.environments.cross_target import TARGETS, Route, compiler_missing, emulator_missing, route

VARIANT = "torch214-cxx11-cpu-aarch64-linux"
AARCH64 = TARGETS["aarch64"]


def _unavailable() -> str | None:
    if route("aarch64-linux") is not Route.CROSS:
        return "aarch64-linux variants are cross-built only on x86_64 Linux"
    from kernel_builder.environments.store import envs_root

    return compiler_missing(AARCH64) or emulator_missing(AARCH64) or emulation_root.missing_reason(AARCH64, envs_root())


pytestmark = [pytest.mark.e2e, pytest.mark.skipif(_unavailable() is not None, reason=str(_unavailable()))]


# Every emulated torch import costs a minute or more: swiglu goes through the import checks of
# `kbuild build` and `kbuild check`; layer-norm skips both (--no-import-check, as a user in a
# hurry would), and its own tests under emulation import it anyway.
IMPORT_CHECKED = {"swiglu": True, "layer-norm": False}


def aarch64_build(name: str) -> tuple[Path, dict]:
    """A copy of examples/<name> with VARIANT built (import check as IMPORT_CHECKED says), once
    per run: (the kernel's folder, the build's JSON row)."""

    def make(folder: Path) -> None:
        skip = [] if IMPORT_CHECKED[name] else ["--no-import-check"]
        done = kbuild("build", str(copy_example(name, folder)), "--variant", VARIANT, "--json", *skip, check=True)
        (folder / "result.json").write_text(json.dumps(json.loads(done.stdout)["jobs"][0]))

    folder = made_once(f"aarch64-{name}", make)
    return folder / name, json.loads((folder / "result.json").read_text())


def run_emulated(script: str, variant: str = VARIANT, pythonpath: str | None = None) -> dict:
    """`script` in the emulated Python of `variant`'s environment (made ready by its build's
    import check); the JSON object its last line prints."""
    from kernel_builder.environments.choice import EnvChooser
    from kernel_builder.environments.cross_env import emulated_ready
    from kernel_builder.variants import Variant

    env = EnvChooser.from_options(create=False).env_for(Variant.parse(variant))
    assert emulated_ready(env), "the build's import check makes the emulated Python"
    environment = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    if pythonpath:
        environment["PYTHONPATH"] = pythonpath
    done = subprocess.run([env.python, "-c", script], capture_output=True, text=True, env=environment)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", ["swiglu", "layer-norm"])
def test_swiglu_and_layer_norm_cross_build_pass_check_and_import_in_the_emulated_python(name):
    root, row = aarch64_build(name)
    assert row["status"] == "built", row
    checks = {c["check"]: c for c in row["checks"]}
    imported = IMPORT_CHECKED[name]
    if imported:
        assert checks["import"]["status"] == "ok" and "registers" in checks["import"]["detail"], checks["import"]
        assert "/bin/python" in checks["import"]["detail"]  # the emulated interpreter, not this machine's
    else:
        assert "import" not in checks, checks["import"]
    done = kbuild("check", str(root / "build" / VARIANT), "--json", *([] if imported else ["--no-import-check"]))
    assert done.returncode == 0, done.stdout + done.stderr
    (report,) = json.loads(done.stdout)
    assert report["ok"], report
    results = {c["check"]: c for c in report["checks"]}
    assert results["arch"]["status"] == "ok" and results["arch"]["detail"].startswith("aarch64 code")
    for check in ("abi", "needed", "gnu-unique", "metadata"):
        assert results[check]["status"] == "ok", results[check]
    # `kbuild check` imports it too, in the emulated Python the build made, unless told not to.
    if imported:
        assert results["import"]["status"] == "ok", results["import"]
    else:
        assert "import" not in results
    from elftools.elf.elffile import ELFFile

    (library,) = (root / "build" / VARIANT).glob("*.so")
    with open(library, "rb") as f:
        assert ELFFile(f).header["e_machine"] == "EM_AARCH64"


# Each kernel's autograd tests (pytest -k autograd: test_swiglu_autograd.py, test_autograd.py):
# its forward and backward ops on every dtype. The whole suites (about 360 tests each) take 10
# to 20 minutes under emulation on CI's two cores; benchmarks/bench_aarch64.py runs them.


@pytest.mark.parametrize("name", ["swiglu", "layer-norm"])
def test_their_own_tests_pass_under_emulation(name):
    root, _ = aarch64_build(name)
    done = kbuild("test", str(root), "--variant", VARIANT, "--", "-k", "autograd")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = re.search(rf"{re.escape(name)} \({VARIANT}\): (\d+) passed, 0 failed", done.stderr)
    assert summary and int(summary[1]) > 0, done.stderr[-2000:]


def test_kernels_0_19_1_and_kbuilds_runtime_pick_the_aarch64_variant_in_the_emulated_python(tmp_path):
    """PyPI's aarch64 torch is a CUDA build, for which both loaders select the cuda backend by
    default: the CPU variant is asked for by its backend (`backend="cpu"`), as on a GH200."""
    root, _ = aarch64_build("swiglu")
    repo = tmp_path / "swiglu"
    shutil.copytree(root / "build" / VARIANT, repo / "build" / VARIANT)
    # This machine's x86_64 variant beside it (a copy standing for one): an aarch64 loader passes it over.
    shutil.copytree(root / "build" / VARIANT, repo / "build" / VARIANT.replace("aarch64", "x86_64"))
    script = f"""
import json, pathlib, platform, torch, kernels
from kernel_builder.runtime.loader import find_variant
kernel = kernels.get_local_kernel(pathlib.Path({str(repo)!r}), backend="cpu")
x = torch.randn(4, 16)
got = kernel.silu_and_mul(x)
want = torch.nn.functional.silu(x[:, :8]) * x[:, 8:]
print(json.dumps({{"machine": platform.machine(), "kernels": kernels.__version__, "file": kernel.__file__,
                  "close": bool(torch.allclose(got, want, atol=1e-5)),
                  "kbuild": find_variant(pathlib.Path({str(repo)!r}) / "build", "cpu").name}}))
"""
    answer = run_emulated(script, pythonpath=str(REPO))
    assert answer["machine"] == "aarch64" and answer["kernels"] == "0.19.1" and answer["close"], answer
    assert f"/build/{VARIANT}/" in answer["file"] and answer["kbuild"] == VARIANT


# PyPI's last aarch64 torch that is a CPU build (2.12-2.14 are CUDA 13.0 builds): with it,
# kernels' own rule (no backend argument) selects the CPU variant, as on an aarch64 CPU machine.
CPU_TORCH_VARIANT = "torch29-cxx11-cpu-aarch64-linux"


def test_with_a_cpu_torch_kernels_picks_the_cpu_variant_by_its_own_rule_and_the_tests_pass(tmp_path):
    """kernels-community's relu calls `kernels.get_kernel(repo)` without a backend, which under
    PyPI's aarch64 torch 2.14 selects cu130. Built for torch 2.9 (a CPU build) it passes its own
    tests under emulation (docs/guides/aarch64.md); the same here with examples/relu: its import
    check and own tests under emulation, and kernels 0.19.1 choosing the CPU variant unasked."""
    root = copy_example("relu", tmp_path)
    built = kbuild("build", str(root), "--variant", CPU_TORCH_VARIANT, "--json", check=True)
    (row,) = json.loads(built.stdout)["jobs"]
    assert {c["check"]: c["status"] for c in row["checks"]}["import"] == "ok", row
    tested = kbuild("test", str(root), "--variant", CPU_TORCH_VARIANT)
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-3000:]
    assert re.search(rf"relu \({CPU_TORCH_VARIANT}\): [1-9]\d* passed, 0 failed", tested.stderr), tested.stderr[-2000:]

    script = f"""
import json, pathlib, torch, kernels
kernel = kernels.get_local_kernel(pathlib.Path({str(root)!r}))
x = torch.randn(64)
print(json.dumps({{"cuda": torch.version.cuda, "file": kernel.__file__,
                  "close": bool(torch.equal(kernel.relu(x), torch.relu(x)))}}))
"""
    answer = run_emulated(script, CPU_TORCH_VARIANT)
    assert answer["cuda"] is None and answer["close"] and f"/build/{CPU_TORCH_VARIANT}/" in answer["file"], answer
