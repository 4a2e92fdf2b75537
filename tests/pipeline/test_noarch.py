"""[torch-noarch] kernels: every backend's variant builds with no nvcc or hipcc on PATH (TPU's
too), its metadata names the backend, with archs only where [torch-noarch] lists them, and the import check runs in the kernel's runtime
environment (kernel_builder.environments.runtime_overlay): ok when its needs install, skipped when they cannot,
failed with the real exception and the kernel's file:line when the kernel itself is broken."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import kbuild

pytestmark = [pytest.mark.e2e, pytest.mark.creates_env]

FIXTURES = Path(__file__).parents[1] / "fixtures"
NOARCH_VARIANTS = ["torch-cpu", "torch-cuda", "torch-metal", "torch-rocm", "torch-xpu", "torch-tpu"]


def no_toolchain_env() -> dict:
    """PATH without the directories holding nvcc or hipcc, and no CUDA/ROCm homes."""
    dirs = [d for d in os.environ["PATH"].split(os.pathsep)
            if d and not any(Path(d, tool).exists() for tool in ("nvcc", "hipcc"))]
    env = dict(os.environ, PATH=os.pathsep.join(dirs))
    for var in ("CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "HIP_PATH"):
        env.pop(var, None)
    return env


def build(name: str, root: Path, env: dict | None = None) -> tuple[Path, dict]:
    kernel = shutil.copytree(FIXTURES / name, root / name)
    result = kbuild("build", str(kernel), "--json", env=env)
    assert "Traceback" not in result.stderr, result.stderr
    return kernel, {row["variant"]: row for row in json.loads(result.stdout)["jobs"]}


def import_check(folder: Path) -> dict:
    result = kbuild("check", str(folder), "--json")
    assert "Traceback" not in result.stderr, result.stderr
    (report,) = json.loads(result.stdout)
    return next(c for c in report["checks"] if c["check"] == "import")


@pytest.fixture(scope="session")
def needs_built(tmp_path_factory):
    """noarch-needs (einops + triton) built once with the toolchains hidden."""
    return build("noarch-needs", tmp_path_factory.mktemp("noarch"), no_toolchain_env())


def test_every_noarch_variant_builds_without_nvcc_or_hipcc(needs_built):
    from kernels._rust import Metadata  # kernels 0.19.1's own reader of metadata.json
    kernel, rows = needs_built
    env = no_toolchain_env()
    assert shutil.which("nvcc", path=env["PATH"]) is None and shutil.which("hipcc", path=env["PATH"]) is None
    assert {v: r["status"] for v, r in rows.items()} == {v: "built" for v in NOARCH_VARIANTS}, rows
    plan = json.loads(kbuild("plan", str(kernel), "--json", env=env, check=True).stdout)
    assert {row["variant"] for row in plan if row["buildable"]} == set(NOARCH_VARIANTS), plan
    for variant in NOARCH_VARIANTS:
        metadata = json.loads((kernel / "build" / variant / "metadata.json").read_text())
        backend = variant.removeprefix("torch-")
        archs = {"archs": ["8.0", "9.0"]} if backend == "cuda" else {}  # build.toml's cuda_capabilities
        assert metadata["backend"] == {"type": backend, **archs}
        read = Metadata.read_from_file(kernel / "build" / variant / "metadata.json")
        assert read.backend.archs == archs.get("archs")
        # [general] kernel-depends everywhere, [general.cuda]'s on cuda only: what kernels' resolver and `kernels lock` follow.
        depends = [{"repo-id": "kernels-community/relu", "version": 1}]
        depends += [{"repo-id": "kernels-community/activation", "revision": "v0.1.0"}] if backend == "cuda" else []
        assert metadata["kernel-depends"] == depends
        assert [d.repo_id for d in read.kernel_depends] == [d["repo-id"] for d in depends]
        assert metadata["python-depends"] == ["einops"]


def test_the_import_check_runs_with_the_kernels_runtime_needs(needs_built):
    kernel, _ = needs_built
    check = import_check(kernel / "build" / "torch-cpu")
    assert check["status"] == "ok", check
    assert "/runtime-envs/" in check["detail"], check  # not the build interpreter, which lacks triton
    # A noarch variant for a device this machine lacks is the same Python: `kbuild check` imports it too.
    check = import_check(kernel / "build" / "torch-cuda")
    assert check["status"] == "ok", check


def test_an_import_nothing_known_provides_skips_the_import_check_and_keeps_the_variant(tmp_path):
    """Not pip-installed by its name (whatever an index serves under it could be anyone's): named in one line."""
    kernel, rows = build("noarch-absent", tmp_path)
    assert rows["torch-cpu"]["status"] == "built", rows
    check = import_check(kernel / "build" / "torch-cpu")
    assert check["status"] == "skipped", check
    assert check["detail"] == (
        "the kernel's runtime needs cannot be met here: torch-cpu/__init__.py imports kbuild_fixture_module_no_index_has: "
        "no distribution is known to provide kbuild_fixture_module_no_index_has, so none is guessed; "
        "install it into the build environment to use it"), check


def test_a_real_import_error_fails_with_the_exception_and_where(tmp_path):
    kernel, rows = build("noarch-broken", tmp_path)
    assert rows["torch-cpu"]["status"] == "failed", rows
    assert "NameError: name 'undefined_name_in_fixture' is not defined" in rows["torch-cpu"]["detail"], rows
    assert "_impl.py:8" in rows["torch-cpu"]["detail"], rows
    result = kbuild("build", str(kernel), "--no-import-check", "--json")
    assert json.loads(result.stdout)["jobs"][0]["status"] == "built", result.stdout
