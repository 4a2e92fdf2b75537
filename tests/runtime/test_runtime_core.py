"""The runtime loader's core guarantees, on pure-Python variant folders (no compiler)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import optional_module
from kernel_builder.runtime import (
    DigestMismatchError,
    KernelLoadError,
    System,
    detect_system,
    hash_variant,
    load_local,
    select_variant,
)

# The runtime loads variants into this interpreter, with its torch.
optional_module("torch")

LINUX = System("x86_64", "linux", (2, 13), True, "cpu")
CUDA = System("x86_64", "linux", (2, 14), True, "cuda", (13, 2))


def make_variant(build: Path, name: str, kernel_id: str, value: int) -> Path:
    folder = build / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("from ._impl import value\nfrom . import layers\n")
    (folder / "_impl.py").write_text(f"value = {value}\n")
    (folder / "layers.py").write_text("__all__ = []\n")
    metadata = {
        "id": kernel_id, "name": "fake-kernel", "version": 1, "license": "MIT", "python-depends": [],
        "backend": {"type": "cpu"}, "digest": {"algorithm": "sha256", "files": hash_variant(folder)},
        "provenance": {"kernel-builder": {"version": "0.1.0"}},
    }
    (folder / "metadata.json").write_text(json.dumps(metadata))
    return folder


def this_machines_variant() -> str:
    s = detect_system("cpu")
    return f"torch{s.torch[0]}{s.torch[1]}-cxx11-cpu-{s.arch}-{s.os}"


def test_selection_rules_and_preference():
    names = ["torch213-cxx11-cpu-x86_64-linux", "torch212-cxx11-cpu-x86_64-linux", "torch-cpu", "torch-universal", "junk"]
    best, trace = select_variant(names, LINUX)
    assert best.name == "torch213-cxx11-cpu-x86_64-linux"
    reasons = {d.variant.name: d.reason for d in trace}
    assert "torch 2.12" in reasons["torch212-cxx11-cpu-x86_64-linux"] and "junk" not in reasons
    assert select_variant(["torch-universal", "torch-cpu"], LINUX)[0].name == "torch-cpu"
    cuda = ["torch214-cxx11-cu126-x86_64-linux", "torch214-cxx11-cu130-x86_64-linux", "torch214-cxx11-cu132-x86_64-linux",
            "torch214-cxx11-cu133-x86_64-linux", "torch-stable-abi210-cu130-x86_64-linux", "torch-stable-abi215-cu130-x86_64-linux"]
    best, trace = select_variant(cuda, CUDA)
    assert best.name == "torch-stable-abi210-cu130-x86_64-linux"
    reasons = {d.variant.name: d.reason for d in trace}
    assert "not compatible" in reasons["torch214-cxx11-cu126-x86_64-linux"]
    assert "not compatible" in reasons["torch214-cxx11-cu133-x86_64-linux"]
    assert "newer" in reasons["torch-stable-abi215-cu130-x86_64-linux"]
    assert select_variant(cuda[:3], CUDA)[0].name == "torch214-cxx11-cu132-x86_64-linux"
    assert "ABI" in select_variant(["torch213-cxx98-cpu-x86_64-linux"], LINUX)[1][0].reason


def test_digest_matches_the_kernels_runtime(tmp_path):
    from kernels._rust import Digest, DigestAlgorithm

    folder = make_variant(tmp_path / "build", this_machines_variant(), "_fake_cpu_aaaaaaa", 1)
    (folder / ".hidden").write_text("x")
    (folder / "sub").mkdir()
    (folder / "sub" / "a.py").write_text("y")
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "z.pyc").write_bytes(b"\0")
    assert hash_variant(folder) == Digest.hash_variant(DigestAlgorithm.SHA256, folder).files


def test_load_local_imports_under_its_id_and_side_by_side(tmp_path):
    a = make_variant(tmp_path / "a" / "build", this_machines_variant(), "_fake_cpu_1111111", 1)
    b = make_variant(tmp_path / "b" / "build", this_machines_variant(), "_fake_cpu_2222222", 2)
    mod_a, mod_b = load_local(tmp_path / "a"), load_local(b)
    assert (mod_a.value, mod_b.value) == (1, 2)
    assert sys.modules["_fake_cpu_1111111"] is mod_a and load_local(a) is mod_a


def test_tampered_variant_is_refused_before_import(tmp_path):
    folder = make_variant(tmp_path / "build", this_machines_variant(), "_fake_cpu_3333333", 3)
    (folder / "_impl.py").write_text("value = 666\n")
    with pytest.raises(DigestMismatchError, match="_impl.py: hash mismatch"):
        load_local(tmp_path)
    assert "_fake_cpu_3333333" not in sys.modules


def test_no_fitting_variant_says_why(tmp_path):
    make_variant(tmp_path / "build", "torch299-cxx11-cpu-x86_64-linux", "_fake_cpu_4444444", 4)
    with pytest.raises(KernelLoadError, match="torch 2.99 does not match"):
        load_local(tmp_path)


def test_importing_the_runtime_stays_light():
    code = ("import sys, kernel_builder.runtime as r; "
            "print(sorted(m for m in ('huggingface_hub', 'typer', 'jinja2', 'rich', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
