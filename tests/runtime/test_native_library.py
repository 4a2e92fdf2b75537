"""The loader maps exactly the library bytes it verified (kernel_builder.runtime.native_library):
a library swapped in after the check, before `_ops.py` loads it, never runs."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

import kernel_builder.runtime.loader as loader
from conftest import optional_module
from kernel_builder.runtime import DigestMismatchError, detect_system, hash_variant, load_local
from kernel_builder.runtime import native_library

# The runtime loads variants into this interpreter, with its torch.
optional_module("torch")

pytestmark = pytest.mark.skipif(not native_library.supported(), reason="memfd_create is Linux only")

OPS = 'import pathlib, torch\ntorch.ops.load_library(str(pathlib.Path(__file__).with_name("_lib.so")))\n'
_ids = iter(range(10**6))


def make_variant(root: Path, library: bytes) -> Path:
    """A variant for this machine whose `_ops.py` loads `_lib.so` by path, as kbuild's does."""
    folder = root / "build" / detect_system().variant_name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("from ._ops import value\n")
    (folder / "_ops.py").write_text(OPS + "value = 1\n")
    (folder / "_lib.so").write_bytes(library)
    metadata = {
        "id": f"_native_cpu_{os.getpid()}{next(_ids):04d}", "name": "native", "version": 1, "license": "MIT",
        "python-depends": [], "backend": {"type": "cpu"},
        "digest": {"algorithm": "sha256", "files": hash_variant(folder)}, "provenance": {
            "kernel-builder": {"version": "0.1.0", "commit": "0" * 40, "dirty": False},
            "kernel": {"commit": "1" * 40, "dirty": False},
        },
    }
    (folder / "metadata.json").write_text(json.dumps(metadata))
    return folder


def replace(folder: Path, library: Path) -> None:
    """Swap `library` in as the variant's `_lib.so` in one rename (staged outside the folder)."""
    staged = folder.parents[2] / ".staged.so"
    shutil.copy(library, staged)
    os.replace(staged, folder / "_lib.so")


def swap_after_check(monkeypatch, folder: Path, evil: Path) -> None:
    """Replace the library right after the loader verified the folder."""
    verify = loader.verify_digest

    def verify_then_swap(path, metadata):
        problems = verify(path, metadata)
        replace(folder, evil)
        return problems

    monkeypatch.setattr(loader, "verify_digest", verify_then_swap)


@pytest.fixture
def mapped(monkeypatch) -> list[bytes]:
    """No compiler needed: dlopen (ctypes.CDLL, which torch.ops.load_library calls too) is
    stood in for, and records the bytes it was handed."""
    import torch  # noqa: F401  (first: importing it loads libraries of its own)

    seen: list[bytes] = []
    monkeypatch.setattr(ctypes, "CDLL", lambda path, *a, **kw: seen.append(Path(path).read_bytes()))
    return seen


def test_a_library_swapped_after_the_check_is_refused_unmapped(tmp_path, monkeypatch, mapped):
    folder = make_variant(tmp_path / "k", b"GOOD library bytes")
    (tmp_path / "evil.so").write_bytes(b"EVIL library bytes")
    swap_after_check(monkeypatch, folder, tmp_path / "evil.so")
    with pytest.raises(DigestMismatchError, match="_lib.so no longer matches its digest"):
        load_local(tmp_path / "k")
    assert mapped == []


def test_a_library_swapped_after_its_verified_read_does_not_matter(tmp_path, monkeypatch, mapped):
    folder = make_variant(tmp_path / "k", b"GOOD library bytes")
    (tmp_path / "evil.so").write_bytes(b"EVIL library bytes")
    memfd = native_library._memfd

    def memfd_then_swap(name, data):
        path = memfd(name, data)
        replace(folder, tmp_path / "evil.so")
        return path

    monkeypatch.setattr(native_library, "_memfd", memfd_then_swap)
    assert load_local(tmp_path / "k").value == 1
    assert mapped == [b"GOOD library bytes"]


def test_a_library_that_is_not_a_variant_file_loads_by_path_as_before(tmp_path, mapped):
    make_variant(tmp_path / "k", b"GOOD library bytes")
    import torch

    load_local(tmp_path / "k")  # wraps torch.ops.load_library

    (tmp_path / "other.so").write_bytes(b"OTHER")
    torch.ops.load_library(str(tmp_path / "other.so"))
    assert mapped == [b"GOOD library bytes", b"OTHER"]


# -- with real libraries, whose constructors leave a mark -----------------------------------------
def library(tmp_path: Path, name: str, marker: Path | None) -> Path:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the test libraries")
    source = tmp_path / f"{name}.c"
    body = f'FILE *f = fopen("{marker}", "w"); if (f) fclose(f);' if marker else ""
    source.write_text(f"#include <stdio.h>\n__attribute__((constructor)) static void init(void) {{ {body} }}\n")
    out = tmp_path / f"{name}.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out), str(source)], check=True, capture_output=True)
    return out


@pytest.mark.e2e
def test_a_library_swapped_after_the_check_never_runs(tmp_path, monkeypatch):
    marker = tmp_path / "evil-ran"
    good, evil = library(tmp_path, "good", None), library(tmp_path, "evil", marker)
    folder = make_variant(tmp_path / "k", good.read_bytes())
    swap_after_check(monkeypatch, folder, evil)
    with pytest.raises(DigestMismatchError):
        load_local(tmp_path / "k")
    assert not marker.exists(), "the swapped library's constructor ran"


@pytest.mark.e2e
def test_a_library_swapped_in_a_loop_while_loading_never_runs(tmp_path):
    marker = tmp_path / "evil-ran"
    good, evil = library(tmp_path, "good", None), library(tmp_path, "evil", marker)
    for attempt in range(20):
        folder = make_variant(tmp_path / f"k{attempt}", good.read_bytes())
        stop = threading.Event()

        def swap():
            while not stop.is_set():
                for source in (evil, good):
                    replace(folder, source)

        swapper = threading.Thread(target=swap)
        swapper.start()
        try:
            load_local(tmp_path / f"k{attempt}")
        except DigestMismatchError:
            pass  # refused: the swap was seen
        finally:
            stop.set()
            swapper.join()
        assert not marker.exists(), f"the swapped library's constructor ran (attempt {attempt})"


EXTENSION = """
#include <Python.h>
#include <stdio.h>
__attribute__((constructor)) static void init(void) { %s }
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_ext", NULL, -1, NULL};
PyMODINIT_FUNC PyInit__ext(void) { return PyModule_Create(&def); }
"""


def extension(tmp_path: Path, name: str, marker: Path | None) -> Path:
    """An extension module `_ext` (as a legacy `_ops.py` imports its library: `from . import _x`)."""
    import sysconfig

    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the test extension")
    source = tmp_path / f"{name}.c"
    source.write_text(EXTENSION % (f'FILE *f = fopen("{marker}", "w"); if (f) fclose(f);' if marker else ""))
    out = tmp_path / f"{name}.so"
    include = sysconfig.get_paths()["include"]
    subprocess.run(["cc", "-shared", "-fPIC", f"-I{include}", "-o", str(out), str(source)], check=True, capture_output=True)
    return out


@pytest.mark.e2e
def test_an_extension_module_loads_from_its_verified_bytes(tmp_path, monkeypatch):
    import importlib.machinery

    marker = tmp_path / "evil-ran"
    good, evil = extension(tmp_path, "good", None), extension(tmp_path, "evil", marker)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for name, swap in (("ok", False), ("swapped", True)):
        folder = make_variant(tmp_path / name, b"")
        (folder / "_lib.so").unlink()
        (folder / "_ops.py").write_text("from . import _ext\nvalue = 1\n")
        (folder / f"_ext{suffix}").write_bytes(good.read_bytes())
        metadata = json.loads((folder / "metadata.json").read_text())
        metadata["digest"]["files"] = hash_variant(folder)
        (folder / "metadata.json").write_text(json.dumps(metadata))
        if not swap:
            module = load_local(tmp_path / name)
            assert module._ext.__file__ == str(folder / f"_ext{suffix}")
            continue
        verify = loader.verify_digest

        def verify_then_swap(path, metadata, folder=folder):
            problems = verify(path, metadata)
            staged = tmp_path / ".staged.so"
            shutil.copy(evil, staged)
            os.replace(staged, folder / f"_ext{suffix}")
            return problems

        monkeypatch.setattr(loader, "verify_digest", verify_then_swap)
        with pytest.raises(DigestMismatchError):
            load_local(tmp_path / name)
    assert not marker.exists(), "the swapped extension's constructor ran"


@pytest.mark.e2e
def test_a_library_loaded_by_path_before_it_was_verified_is_not_loaded_twice(tmp_path):
    """`kbuild test`'s python-name shim (or kernels' loader) loads a variant by path first;
    kbuild's loader then maps no second copy, whose ops would register twice (torch aborts)."""
    import torch

    folder = make_variant(tmp_path / "k", library(tmp_path, "good", None).read_bytes())
    torch.ops.load_library(str(folder / "_lib.so"))  # before any verified variant: plain torch
    before = native_library._open_memfds.copy()
    assert load_local(tmp_path / "k").value == 1
    assert native_library._open_memfds == before, "a second copy was mapped from memory"
