"""[tvm-ffi] kernels (kernel-builder's relu-tvm-ffi layout, tests/fixtures/tvm-ffi-relu): `kbuild build`
makes the cpu variant kernel-builder names (tvm-ffi01-cpu-x86_64-linux), checked before install,
and the `kernels` runtime itself (0.19.1) loads it and runs it on torch tensors and NumPy arrays;
the cuda variant (tvm-ffi01-cu130-...) where nvcc is; xpu is skipped with the reason. One build,
shared by the tests of this module."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import kbuild, made_once

pytestmark = [pytest.mark.e2e]

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tvm-ffi-relu"


@pytest.fixture(scope="module")
def tvm_relu() -> tuple[Path, dict]:
    """A copy of the fixture built once per test run, and its `kbuild build --json` report."""

    def make(folder: Path) -> None:
        root = Path(shutil.copytree(FIXTURE, folder / "tvm-ffi-relu"))
        result = kbuild("build", str(root), "--json", check=True)
        (folder / "report.json").write_text(result.stdout)

    folder = made_once("tvm-ffi-relu", make)
    return folder / "tvm-ffi-relu", json.loads((folder / "report.json").read_text())


def tvm_ffi_python() -> str:
    """The interpreter kbuild built and checked with (kbuild's packages plus apache-tvm-ffi)."""
    from kernel_builder.compile.tvm_ffi import find_toolchain

    return find_toolchain(sys.executable).python


def test_cpu_variant_is_built_checked_and_named_as_kernels_reads_it(tvm_relu):
    root, report = tvm_relu
    rows = {row["backend"]: row for row in report["jobs"]}
    cpu = rows["cpu"]
    assert cpu["status"] == "built", cpu
    statuses = {c["check"]: c["status"] for c in cpu["checks"]}
    # libstdc++ symbol versions follow this machine's compiler: a warning in a local build, as for torch variants
    assert statuses.pop("abi") in ("ok", "warning")
    assert statuses == {"needed": "ok", "gnu-unique": "ok", "metadata": "ok", "import": "ok"}
    assert "relu_cpu" in next(c["detail"] for c in cpu["checks"] if c["check"] == "import")
    assert rows["xpu"]["status"] == "skipped" and "cpu and cuda only" in rows["xpu"]["detail"]
    from kernels._internals.variants import TvmFfi, parse_variant

    variant = parse_variant(cpu["variant"])
    assert isinstance(variant.framework, TvmFfi) and variant.backend.name == "cpu"
    folder = root / "build" / cpu["variant"]
    metadata = json.loads((folder / "metadata.json").read_text())
    assert metadata["backend"] == {"type": "cpu"} and metadata["id"].startswith("_tvm_ffi_relu_cpu_")
    assert set(metadata["digest"]["files"]) == {
        "__init__.py", "layers/__init__.py", "_ops.py", f"{metadata['id']}.so",
    }


def test_cuda_variant_is_compiled_for_the_units_capabilities_where_nvcc_is(tvm_relu):
    """nvcc for the .cu files (the fixture's one capability), cudart linked statically; with no
    CUDA GPU here kernels would not pick it, so the import check opens the library alone."""
    from kernel_builder.compile.tvm_ffi import find_nvcc

    root, report = tvm_relu
    cuda = {row["backend"]: row for row in report["jobs"]}["cuda"]
    nvcc = find_nvcc()
    if nvcc is None:
        assert cuda["status"] == "skipped" and "nvcc" in cuda["detail"]
        return
    assert cuda["status"] == "built", cuda
    assert cuda["variant"] == f"tvm-ffi01-cu{nvcc.version[0]}{nvcc.version[1]}-x86_64-linux"
    statuses = {c["check"]: c["status"] for c in cuda["checks"]}
    assert statuses.pop("abi") in ("ok", "warning")
    assert statuses == {"needed": "ok", "gnu-unique": "ok", "metadata": "ok", "import": "ok"}
    assert "relu_cuda" in next(c["detail"] for c in cuda["checks"] if c["check"] == "import")
    from kernels._internals.variants import TvmFfi, parse_variant

    variant = parse_variant(cuda["variant"])
    assert isinstance(variant.framework, TvmFfi) and variant.backend.name == "cuda"
    metadata = json.loads((root / "build" / cuda["variant"] / "metadata.json").read_text())
    assert metadata["backend"] == {"type": "cuda", "archs": ["9.0"]}


def test_kernels_loads_the_build_and_runs_it(tvm_relu):
    """The oracle: kernels.get_local_kernel picks the variant, verifies its digests and imports it."""
    root, _ = tvm_relu
    script = (
        "import sys; from pathlib import Path; import kernels, numpy as np, torch\n"
        "k = kernels.get_local_kernel(Path(sys.argv[1]))\n"
        "x = torch.linspace(-3, 3, 1001)\n"
        "assert torch.equal(k.relu(x, torch.empty_like(x)), torch.relu(x))\n"
        "assert torch.equal(k.layers.ReLU()(x[5:]), torch.relu(x[5:]))\n"
        "a = np.arange(-4, 4, dtype=np.float32); out = np.empty_like(a); k.relu(a, out)\n"
        "assert out.tolist() == [0, 0, 0, 0, 0, 1, 2, 3], out\n"
        "try:\n    k.relu(x.double(), torch.empty_like(x.double()))\nexcept TypeError as e:\n    print('refused:', e)\n"
        "print(k.__name__)\n"
    )
    done = subprocess.run([tvm_ffi_python(), "-c", script, str(root)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "only float32 is supported" in done.stdout and "_tvm_ffi_relu_cpu_" in done.stdout


def test_a_second_build_is_up_to_date(tvm_relu):
    root, _ = tvm_relu
    result = kbuild("build", str(root), "--json", check=True)
    rows = {row["backend"]: row["status"] for row in json.loads(result.stdout)["jobs"]}
    assert rows["cpu"] == "up-to-date" and rows["xpu"] == "skipped"
    assert rows["cuda"] in ("up-to-date", "skipped")  # skipped where no nvcc is


def test_a_kernel_with_no_buildable_backend_fails_with_the_reason(tmp_path):
    """A cuda unit with a dependency kbuild does not provide (CUTLASS it does: cutlass-gemm-tvm-ffi's
    cutlass_3_6 builds, tests/compile/test_cutlass_depends.py), and xpu: nothing compiles here."""
    root = Path(shutil.copytree(FIXTURE, tmp_path / "tvm-ffi-relu"))
    toml = root / "build.toml"
    text = toml.read_text().replace('backends = ["cpu", "cuda", "xpu"]', 'backends = ["cuda", "xpu"]')
    toml.write_text(text.replace('backend = "cuda"\ndepends = []', 'backend = "cuda"\ndepends = ["sycl_tla"]'))
    result = kbuild("build", str(root))
    assert result.returncode == 1
    said = " ".join(result.stdout.split())
    assert "kbuild builds [tvm-ffi] kernels for cpu and cuda only so far" in said
    assert "depends ['sycl_tla'] of a [tvm-ffi] cuda unit: kbuild builds none yet" in said or "nvcc" in said
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert errors == ["kbuild: error: nothing to build for 'tvm-ffi-relu' on this machine: every backend was skipped"]
    assert not (root / "build").exists() or not any((root / "build").iterdir())


def test_a_rust_unit_is_skipped_with_the_reason(tmp_path):
    """Edition 6's rust-cpu units (kernel-builder builds them with cargo) are not compiled, and
    not silently dropped: the backend is skipped, naming the unit."""
    root = Path(shutil.copytree(FIXTURE, tmp_path / "tvm-ffi-relu"))
    (root / "cpu" / "lib.rs").write_text("// a Rust kernel\n")
    (root / "Cargo.toml").write_text('[package]\nname = "relu"\nversion = "0.1.0"\n')
    (root / "build.toml").write_text(
        '[general]\nname = "tvm-ffi-relu"\nversion = 1\nedition = 6\nlicense = "MIT"\nbackends = ["cpu"]\n\n'
        '[tvm-ffi]\nsrc = ["binding/binding.cpp"]\n\n'
        '[kernel.relu_rs]\nlanguage = "rust-cpu"\ncargo-manifest = "Cargo.toml"\nsrc = ["cpu/lib.rs"]\n'
    )
    result = kbuild("build", str(root))
    assert result.returncode == 1
    assert "Rust unit [kernel.relu_rs] (rust-cpu): kbuild does not build Rust units yet" in " ".join(result.stdout.split())
