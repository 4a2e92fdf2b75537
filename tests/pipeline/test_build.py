"""`kbuild build` end to end on a small real kernel: g++, CMake, Ninja, torch 2.13.

One cold build per module; the lifecycle test then edits sources in place to check the
input-hash skip, incremental rebuilds and that a failed build leaves the old output."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import REPO, kbuild, optional_module
from kernel_builder.pipeline.options import BuildOptions
from kernel_builder.pipeline.build_kernel import build_kernel
from kernel_builder.errors import VariantError

torch = optional_module("torch")

pytestmark = pytest.mark.e2e

VARIANT = f"torch{torch.__version__.split('.')[0]}{torch.__version__.split('.')[1]}-cxx11-cpu-x86_64-linux"
FIXTURE = REPO / "tests" / "fixtures" / "tiny"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tiny") / "tiny"
    shutil.copytree(FIXTURE, root)
    kbuild("build", str(root), check=True)
    return root


def test_variant_folder_layout(tiny):
    folder = tiny / "build" / VARIANT
    metadata = json.loads((folder / "metadata.json").read_text())
    ops_name = metadata["id"]
    assert ops_name.startswith("_tiny_cpu_") and len(ops_name) == len("_tiny_cpu_") + 7
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(["__init__.py", "_ops.py", "layers.py", "metadata.json", "symbols.json", f"{ops_name}.abi3.so"])
    ops_py = (folder / "_ops.py").read_text()
    assert f"torch.ops.{ops_name}" in ops_py and f'"{ops_name}.abi3.so"' in ops_py
    assert f'"{ops_name}::{{op_name}}"' in ops_py
    # No half-written leftovers beside the variant.
    assert [p.name for p in (tiny / "build").iterdir()] == [VARIANT]


def test_metadata_is_complete_and_the_reference_runtime_accepts_it(tiny):
    from kernels._rust import Digest, DigestAlgorithm, Metadata

    folder = tiny / "build" / VARIANT
    metadata = json.loads((folder / "metadata.json").read_text())
    for key in ("id", "name", "version", "license", "python-depends", "backend", "digest", "provenance"):
        assert key in metadata, key
    assert metadata["backend"] == {"type": "cpu"} and metadata["name"] == "tiny" and metadata["version"] == 1
    assert metadata["provenance"]["kernel-builder"]["version"]
    parsed = Metadata.read_from_file(folder / "metadata.json")
    assert parsed.id == metadata["id"]
    # Our digest is the one the kernels runtime computes for the same folder.
    parsed.digest.validate(Digest.hash_variant(DigestAlgorithm.SHA256, folder))


def test_loads_with_kernels_and_computes(tiny):
    import kernels

    module = kernels.get_local_kernel(tiny, backend="cpu")
    x = torch.randn(5, 3)
    torch.testing.assert_close(module.add_one(x), x + 1)
    assert module.ops.add_one.default.name().startswith("_tiny_cpu_")


def test_unknown_or_foreign_variant_is_a_clear_error(tiny):
    result = kbuild("build", str(tiny), "--variant", "torch213-metal-aarch64-darwin")
    assert result.returncode == 2 and "needs platform aarch64-darwin (this machine is x86_64-linux)" in result.stderr
    result = kbuild("build", str(tiny), "--variant", "torch-flash")
    assert result.returncode == 2 and "not a variant name" in result.stderr
    result = kbuild("build", str(tiny), "--variant", "torch213-cxx11-rocm71-x86_64-linux")
    assert result.returncode == 2 and "does not list backend 'rocm'" in result.stderr
    # Another torch needs another environment; without creating one, that is the error.
    result = kbuild("build", str(tiny), "--no-create-env", "--variant", "torch212-cxx11-cpu-x86_64-linux")
    assert result.returncode == 2 and "no build environment with torch 2.12" in result.stderr
    assert "kbuild env create torch212-cpu" in result.stderr
    # An environment named with --env is never replaced by another one.
    with pytest.raises(VariantError, match="--env .* has torch 2.13"):
        build_kernel(tiny, BuildOptions(variants=("torch212-cxx11-cpu-x86_64-linux",), env=Path(sys.executable)))


def test_skipped_backend_is_reported_not_failed(tiny):
    result = kbuild("build", str(tiny), "--json", check=True)
    rows = {r["backend"]: r for r in json.loads(result.stdout)["jobs"]}
    assert rows["metal"]["status"] == "skipped" and "xcrun not found" in rows["metal"]["detail"]
    assert rows["cpu"]["status"] == "up-to-date"


def test_out_option_writes_elsewhere(tiny, tmp_path):
    out = tmp_path / "elsewhere"
    manifest, report = build_kernel(tiny, BuildOptions(out=out))
    results = report.results
    assert [r.status for r in results if r.backend == "cpu"] == ["built"]  # new output, same work tree
    assert (out / VARIANT / "metadata.json").exists()


def test_second_build_compiles_nothing(tiny):
    """Its time is a benchmark's figure (benchmarks/), not a timed test's."""
    library = next((tiny / "build" / VARIANT).glob("*.so"))
    before = library.stat().st_mtime_ns
    result = kbuild("build", str(tiny), check=True)
    # The report on stdout (`| tee` keeps it), its totals line last; progress stays on stderr.
    assert "up-to-date" in result.stdout and "output in" in result.stdout.strip().splitlines()[-1]
    assert "output in" not in result.stderr
    assert library.stat().st_mtime_ns == before


def test_lifecycle_noop_edit_rebuild_and_failed_build_keeps_old_output(tiny):
    folder = tiny / "build" / VARIANT
    library = next(folder.glob("*.so"))
    before = library.stat().st_mtime_ns

    # Nothing changed: nothing compiled, the output untouched.
    results = build_kernel(tiny)[1].results
    assert [r.status for r in results if r.backend == "cpu"] == ["up-to-date"]
    assert library.stat().st_mtime_ns == before

    # A tampered output is rebuilt, not trusted.
    (folder / "layers.py").write_text("# changed\n")
    results = build_kernel(tiny)[1].results
    assert [r.status for r in results if r.backend == "cpu"] == ["built"]

    # An edit to a unit's source rebuilds, and the new code is what loads.
    source = tiny / "cpu" / "add.cpp"
    source.write_text(source.read_text().replace("x + TINY_UNIT_FLAG", "x + 2 * TINY_UNIT_FLAG"))
    results = build_kernel(tiny)[1].results
    assert [r.status for r in results if r.backend == "cpu"] == ["built"]
    good = json.loads((folder / "metadata.json").read_text())

    # A broken source fails with the compiler's first error, and the last good output stays.
    source.write_text(source.read_text() + "\nthis is not C++;\n")
    result = kbuild("build", str(tiny))
    assert result.returncode == 1
    assert "add.cpp" in result.stdout and "error" in result.stdout and "build.log" in result.stdout
    assert json.loads((folder / "metadata.json").read_text()) == good
    assert [p.name for p in (tiny / "build").iterdir()] == [VARIANT]
