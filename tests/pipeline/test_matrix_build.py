"""`kbuild build --matrix` end to end with real compiles: jobs in parallel, a failing job
that does not stop the others (its log's tail shown), --fail-fast, the JSON report, and
the checks every new variant passes before it replaces the previous one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import REPO, kbuild

pytestmark = [pytest.mark.e2e, pytest.mark.creates_env]

TINY = REPO / "tests" / "fixtures" / "tiny"
SELECTION = "backend=cpu torch>=2.13 os=linux arch=x86_64"
OLD, NEW = "torch213-cxx11-cpu-x86_64-linux", "torch214-cxx11-cpu-x86_64-linux"
BROKEN_ON_213 = """#include <torch/version.h>
#if TORCH_VERSION_MINOR == 13
#error "kbuild-test: this unit does not build with torch 2.13"
#endif
"""


@pytest.fixture
def tiny(tmp_path) -> Path:
    root = tmp_path / "tiny"
    shutil.copytree(TINY, root)
    return root


def test_a_failing_job_does_not_stop_the_others_and_fail_fast_does(tiny):
    source = tiny / "cpu" / "add.cpp"
    good = source.read_text()
    source.write_text(BROKEN_ON_213 + good)

    result = kbuild("build", str(tiny), "--matrix", SELECTION, "--jobs", "2")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    err = result.stdout  # the report
    assert f"{OLD}: last lines of" in err and "kbuild-test: this unit does not build with torch 2.13" in err
    assert f"failed {OLD}: compile failed:" in err
    assert "1 built" in err and "1 failed" in err and "(2 at once)" in err
    assert (tiny / "build" / NEW / "metadata.json").is_file() and not (tiny / "build" / OLD).exists()

    # --fail-fast, one job at a time: the failure comes first, the other never starts.
    result = kbuild("build", str(tiny), "--matrix", SELECTION, "--jobs", "1", "--fail-fast", "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert [(j["variant"], j["status"]) for j in report["jobs"]] == [(OLD, "failed"), (NEW, "cancelled")]
    assert report["ok"] is False and report["counts"]["cancelled"] == 1 and report["concurrent"] == 1
    assert report["jobs"][0]["log"] and Path(report["jobs"][0]["log"]).is_file()


def test_every_new_variant_is_checked_before_it_replaces_the_old_one(tiny):
    result = kbuild("build", str(tiny), "--variant", OLD, "--json", check=True)
    (job,) = json.loads(result.stdout)["jobs"]
    checks = {c["check"]: c for c in job["checks"]}
    assert {"abi", "needed", "metadata", "import"} <= set(checks)
    assert checks["import"]["status"] == "ok" and "registers 1 op: add_one" in checks["import"]["detail"]
    assert checks["metadata"]["status"] == checks["needed"]["status"] == "ok"
    # Built against glibc 2.36, still within manylinux_2_28 (kernel_builder/compile/glibc_compat.py).
    assert checks["abi"]["status"] == "ok", checks["abi"]
    metadata = (tiny / "build" / OLD / "metadata.json").read_text()

    # A binding whose schema does not parse compiles, but cannot be imported: the job
    # fails on its import check and the previous variant stays in place.
    binding = tiny / "torch-ext" / "torch_binding.cpp"
    binding.write_text(binding.read_text().replace('ops.def("add_one(', 'ops.def("add_one((('))
    result = kbuild("build", str(tiny), "--variant", OLD)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"failed {OLD}: check failed, the previous variant is kept: import: import failed" in result.stdout
    assert (tiny / "build" / OLD / "metadata.json").read_text() == metadata
    assert not [p for p in (tiny / "build").iterdir() if p.name.startswith(".kbuild-staging-")]
