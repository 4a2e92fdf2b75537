"""build.toml edition 6 `build-layout = "zip"` end to end: examples/relu built for CPU once per
module with the package packed into `<variant>/<id>.zip`, then loaded by kernels 0.19.1 and by
kbuild's loader in one process, checked by `kbuild check`, tested by `kbuild test`, described
by `kernels describe-api`, and refused by both loaders once the archive is changed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from conftest import copy_example, kbuild, published_kernels, optional_module
from kernel_builder.runtime import KernelLoadError, read_metadata

torch = optional_module("torch")

pytestmark = pytest.mark.e2e

VARIANT = f"torch{torch.__version__.split('.')[0]}{torch.__version__.split('.')[1]}-cxx11-cpu-x86_64-linux"


@pytest.fixture(scope="module")
def relu_zip(tmp_path_factory) -> Path:
    """examples/relu, migrated to edition 6 and switched to the zip layout, built for CPU."""
    root = copy_example("relu", tmp_path_factory.mktemp("zip"))
    kbuild("migrate", str(root), check=True)  # a no-op once the example is edition 6 already
    toml = root / "build.toml"
    text = toml.read_text()
    assert "edition = 6\n" in text
    toml.write_text(text.replace("edition = 6\n", 'edition = 6\nbuild-layout = "zip"\n', 1))
    kbuild("build", str(root), "--variant", VARIANT, check=True)
    return root


def _variant(root: Path) -> tuple[Path, dict]:
    folder = root / "build" / VARIANT
    return folder, json.loads((folder / "metadata.json").read_text())


def _python(script: str, *, path: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    if path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (path, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, env=env, check=False)


def test_the_variant_holds_the_archive_beside_the_library(relu_zip):
    folder, metadata = _variant(relu_zip)
    module_id = metadata["id"]
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f"{module_id}.zip", f"{module_id}.abi3.so", "metadata.json", "symbols.json"]
    )
    assert not list(folder.rglob("*.py"))
    assert metadata["build-layout"] == "zip" and metadata["kernels-minver"] == "0.19.1"
    assert sorted(metadata["digest"]["files"]) == sorted([f"{module_id}.zip", f"{module_id}.abi3.so", "symbols.json"])
    with zipfile.ZipFile(folder / f"{module_id}.zip") as archive:
        entries = archive.infolist()
    names = [e.filename for e in entries]
    assert names == sorted(names) == ["__init__.py", "_ops.py", "layers.py"]
    assert {(e.date_time, e.external_attr >> 16 & 0o777, e.compress_type) for e in entries} == {
        ((1980, 1, 1, 0, 0, 0), 0o644, zipfile.ZIP_STORED)
    }


def test_a_rebuild_writes_the_same_archive(relu_zip, tmp_path):
    folder, metadata = _variant(relu_zip)
    kbuild("build", str(relu_zip), "--variant", VARIANT, "--out", str(tmp_path / "again"), check=True)
    again = json.loads((tmp_path / "again" / VARIANT / "metadata.json").read_text())
    archive = f"{metadata['id']}.zip"
    assert again["id"] == metadata["id"]
    assert again["digest"]["files"][archive] == metadata["digest"]["files"][archive]
    assert (tmp_path / "again" / VARIANT / archive).read_bytes() == (folder / archive).read_bytes()


BOTH_LOADERS = """
    import importlib.resources, sys, torch
    from pathlib import Path
    import kernels
    from kernel_builder.runtime import load_local
    root, first = Path({root!r}), {first!r}
    if first == "kernels":
        theirs = kernels.get_local_kernel(root, backend="cpu")
        ours = load_local(root)
    else:
        ours = load_local(root)
        theirs = kernels.get_local_kernel(root, backend="cpu")
    assert ours is theirs, (ours, theirs)
    assert ours.__name__ == {module_id!r} and ours.__file__.endswith({module_id!r} + ".zip/__init__.py")
    x = torch.tensor([-1.5, 0.0, 2.0])
    assert ours.relu(x).tolist() == [0.0, 0.0, 2.0]
    assert ours.layers.ReLU()(x).tolist() == [0.0, 0.0, 2.0]
    assert ours._ops.ops is getattr(torch.ops, {module_id!r})
    assert sorted(p.name for p in importlib.resources.files(ours).iterdir()) == ["__init__.py", "_ops.py", "layers.py"]
    print("ok")
"""


@pytest.mark.parametrize("first", ["kbuild", "kernels"])
def test_both_loaders_load_it_in_one_process(relu_zip, first):
    _, metadata = _variant(relu_zip)
    done = _python(BOTH_LOADERS.format(root=str(relu_zip), first=first, module_id=metadata["id"]))
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_kernels_without_the_zip_layout_says_upgrade(relu_zip):
    old = published_kernels("0.18.3")  # reads `kernels-minver` but has no zip layout
    done = _python(
        f"""
        import kernels, pathlib
        assert kernels.__version__ == "0.18.3", kernels.__version__
        try:
            kernels.get_local_kernel(pathlib.Path({str(relu_zip)!r}), backend="cpu")
        except RuntimeError as e:
            print(e)
        """,
        path=str(old),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "requires kernels>=0.19.1" in done.stdout and "Upgrade" in done.stdout, done.stdout


def test_kbuild_check_imports_it(relu_zip):
    result = kbuild("check", str(relu_zip), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    [report] = json.loads(result.stdout)
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["metadata"]["status"] == "ok" and "3 files match" in checks["metadata"]["detail"]
    assert checks["import"]["status"] == "ok" and "registers 1 op: relu" in checks["import"]["detail"]


PYTHON_NAME_TEST = """
import torch

import relu
from relu.layers import ReLU


def test_the_archive_imports_by_python_name():
    x = torch.tensor([-1.0, 3.0])
    assert relu.relu(x).tolist() == ReLU()(x).tolist() == [0.0, 3.0]
    assert relu.__file__.endswith(".zip/__init__.py")
"""


def test_kbuild_test_imports_it_by_python_name(relu_zip):
    added = relu_zip / "tests" / "test_python_name.py"
    added.write_text(PYTHON_NAME_TEST)
    try:
        # The kernel's pytest takes the caller's environment: its progress line is read below.
        result = kbuild("test", str(relu_zip), "--json", env={"PYTEST_ADDOPTS": ""})
    finally:
        added.unlink()
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(result.stdout)
    assert data["variant"] == VARIANT and data["counts"]["failed"] == data["counts"]["errors"] == 0
    assert "test_python_name.py ." in result.stderr
    folder, _ = _variant(relu_zip)
    assert not list(folder.rglob("__pycache__"))


def test_kernels_describe_api_reads_its_symbols(relu_zip):
    cli = shutil.which("kernels", path=str(Path(sys.executable).parent))
    assert cli, "the dev venv has kernels 0.19.1's CLI"
    done = subprocess.run([cli, "describe-api", str(relu_zip), "--json"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["functions"] == [{"name": "relu"}]
    assert [layer["name"] for layer in info["layers"]] == ["ReLU"]


def test_a_changed_archive_is_refused_by_both_loaders(relu_zip, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(relu_zip / "build", copy / "build")
    folder, metadata = _variant(copy)
    archive = folder / f"{metadata['id']}.zip"
    with zipfile.ZipFile(archive) as packed:
        members = {name: packed.read(name) for name in packed.namelist()}
    members["__init__.py"] += b"\nTAMPERED = True\n"
    with zipfile.ZipFile(archive, "w") as packed:
        for name, data in members.items():
            packed.writestr(name, data)
    done = _python(
        f"""
        import kernels, pathlib, sys
        from kernel_builder.runtime import DigestMismatchError, load_local
        root = pathlib.Path({str(copy)!r})
        try:
            load_local(root)
        except DigestMismatchError as e:
            print("kbuild refused:", e)
        try:
            kernels.get_local_kernel(root, backend="cpu")
        except RuntimeError as e:
            print("kernels refused:", e)
        print("imported" if {metadata['id']!r} in sys.modules else "not imported")
        """
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "kbuild refused: " in done.stdout and f"{archive.name}: hash mismatch" in done.stdout, done.stdout
    assert "kernels refused:" in done.stdout, done.stdout
    assert done.stdout.strip().endswith("not imported")


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("build-layout", "tar", "'build-layout' must be one of files, zip, got 'tar'"),
        ("kernels-minver", "0.19", "'kernels-minver' must be a version such as \"0.19.1\", got '0.19'"),
        ("kernels-minver", 19, "'kernels-minver' must be a version such as \"0.19.1\", got 19"),
    ],
)
def test_layout_keys_that_kernels_cannot_read_are_one_line_errors(relu_zip, tmp_path, key, value, expected):
    folder, metadata = _variant(relu_zip)
    (tmp_path / "metadata.json").write_text(json.dumps({**metadata, key: value}))
    with pytest.raises(KernelLoadError) as e:
        read_metadata(tmp_path)
    assert expected in e.value.message and "\n" not in e.value.message


def test_a_missing_archive_is_a_one_line_error(relu_zip, tmp_path):
    from kernel_builder.runtime import load_local

    folder, metadata = _variant(relu_zip)
    shutil.copytree(folder, tmp_path / "v")
    (tmp_path / "v" / f"{metadata['id']}.zip").unlink()
    with pytest.raises(KernelLoadError, match=f"has no {metadata['id']}.zip"):
        load_local(tmp_path / "v", verify=False)
