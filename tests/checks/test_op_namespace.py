"""The import check fails a variant that registers ops outside its op namespace (kernel-builder
fails such builds with its ops-registration check), from C++ or from Python, and names them;
ops that torch's own modules define while the variant imports them are not the variant's."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from kernel_builder.checks.variant_checks import FAILED, OK, check_variant
from kernel_builder.runtime.digest import hash_variant

pytestmark = pytest.mark.e2e

# A Python registration without add_op_namespace_prefix, beside an import of a torch module
# that defines ops of its own (quantized_decomposed::...) when first imported.
LEAK = '''import torch
import torch.ao.quantization.fx._decomposed


@torch.library.custom_op("myops::leak", mutates_args=())
def leak(x: torch.Tensor) -> torch.Tensor:
    return x.clone()
'''


def test_ops_registered_outside_the_namespace_fail_the_import_check(shared_static, tmp_path):
    """Build A's variant, given a Python registration in `myops` and, loaded from its _ops.py,
    build B's library: a real C++ registration under a namespace that is not A's."""
    ours, other = (next((root / "build").iterdir()) for root in shared_static)
    folder = tmp_path / ours.name
    shutil.copytree(ours, folder)
    [library] = other.glob("*.so")
    shutil.copy(library, folder / library.name)
    (folder / "leak.py").write_text(LEAK)
    with (folder / "__init__.py").open("a") as f:
        f.write("from . import leak\n")
    with (folder / "_ops.py").open("a") as f:
        f.write(f"torch.ops.load_library(str(pathlib.Path(__file__).with_name({library.name!r})))\n")
    metadata = json.loads((folder / "metadata.json").read_text())
    metadata["digest"]["files"] = hash_variant(folder)  # only the registrations are left to find
    (folder / "metadata.json").write_text(json.dumps(metadata))

    report = check_variant(folder, import_check=True, strict_abi=False, python=sys.executable)
    checks = {r.check: r for r in report.results}
    assert checks["metadata"].status == OK and checks["import"].status == FAILED
    theirs = json.loads((other / "metadata.json").read_text())["id"]
    assert checks["import"].detail == (
        f"registers {theirs}::next_count, myops::leak outside its op namespace {metadata['id']}: register with "
        "TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ...) in C++ and add_op_namespace_prefix(...) from _ops in Python"
    )


def test_a_package_that_imports_its_ops_lazily_passes_with_its_ops_counted(shared_static, tmp_path):
    """kernels-community's msa imports `_ops` only inside the functions that call an op: importing
    the package loads no library (kernel-builder's import check passes it), so the check loads
    `_ops` as the first call would and finds the ops registered under the variant's id."""
    ours, _ = (next((root / "build").iterdir()) for root in shared_static)
    folder = tmp_path / ours.name
    shutil.copytree(ours, folder)
    init = folder / "__init__.py"
    init.write_text("def lazily():\n    from ._ops import ops\n    return ops\n")
    metadata = json.loads((folder / "metadata.json").read_text())
    metadata["digest"]["files"] = hash_variant(folder)
    (folder / "metadata.json").write_text(json.dumps(metadata))

    report = check_variant(folder, import_check=True, strict_abi=False, python=sys.executable)
    checks = {r.check: r for r in report.results}
    assert checks["import"].status == OK and "registers 1 op" in checks["import"].detail, checks["import"].detail
