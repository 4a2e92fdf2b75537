"""Two kernels in one process never share a static (kernel_builder.compile.unique_symbols, and
the gnu-unique check): the premise on two plain libraries, the flag for GCC only, and two kbuild
builds with the same class loaded together by kbuild's loader and by `kernels`."""

from __future__ import annotations

import glob
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_builder.checks.variant_checks import FAILED, OK, check_gnu_unique
from kernel_builder.compile.unique_symbols import FLAG, language_options

GCC = shutil.which("g++")
needs_gcc = pytest.mark.skipif(GCC is None, reason="g++ is not installed: the gnu_unique binding is GCC's")

# What GCC makes a gnu_unique symbol: a function-local static of an inline member function.
COUNTER = """struct Counter { static int next() { static int count = 0; return ++count; } };
extern "C" int bump() { return Counter::next(); }
"""

# Both libraries loaded as torch.ops.load_library loads a kernel (ctypes: RTLD_LOCAL).
BUMP_BOTH = "import ctypes, sys\na, b = map(ctypes.CDLL, sys.argv[1:])\nprint(a.bump(), a.bump(), b.bump())"


def two_libraries(tmp_path: Path, flags: tuple[str, ...]) -> list[Path]:
    source = tmp_path / "counter.cpp"
    source.write_text(COUNTER)
    libraries = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        library = tmp_path / name / f"_{name}.so"
        subprocess.run([GCC, "-shared", "-fPIC", "-O2", *flags, "-o", str(library), str(source)], check=True)
        libraries.append(library)
    return libraries


@pytest.mark.e2e
@needs_gcc
@pytest.mark.parametrize(("flags", "counts", "verdict"), [((), ["1", "2", "3"], FAILED), ((FLAG,), ["1", "2", "1"], OK)])
def test_gcc_shares_a_static_between_libraries_unless_told_not_to(tmp_path, flags, counts, verdict):
    libraries = two_libraries(tmp_path, flags)
    done = subprocess.run([sys.executable, "-c", BUMP_BOTH, *map(str, libraries)], capture_output=True, text=True, check=True)
    assert done.stdout.split() == counts
    result = check_gnu_unique(libraries[0].parent)
    assert result.status == verdict, result
    if verdict == FAILED:
        assert result.detail == (
            "_a.so exports 1 gnu_unique symbol (Counter::next()::count), which every kernel in the process would "
            "share: compile with -fno-gnu-unique (`kbuild build` does, with GCC)"
        )


def _clang() -> str | None:
    return shutil.which("clang++") or next(iter(sorted(glob.glob("/usr/lib/llvm-*/bin/clang++"))), None)


@needs_gcc
def test_the_flag_goes_to_gcc_and_nvccs_gcc_host_never_to_clang():
    cache = {"CMAKE_CXX_COMPILER": GCC, "CMAKE_CUDA_HOST_COMPILER": GCC}
    assert language_options(("CXX", "CUDA"), cache) == (("CXX", (FLAG,)), ("CUDA", (f"-Xcompiler={FLAG}",)))
    # HIP is clang's, which never emits the binding: only the host compiler's C++ gets it.
    assert language_options(("CXX", "HIP"), {"CMAKE_CXX_COMPILER": GCC}) == (("CXX", (FLAG,)),)
    clang = _clang()
    if clang is None:
        pytest.skip("no clang++ here to show that a compiler refusing the flag does not get it")
    assert language_options(("CXX",), {"CMAKE_CXX_COMPILER": clang}) == ()


LOADERS = {
    "kbuild": "from kernel_builder.runtime import load_local\n"
              "a, b = (load_local(root, backend='cpu') for root in sys.argv[1:])\n",
    "kernels": "import pathlib, kernels\n"
               "a, b = (kernels.get_local_kernel(pathlib.Path(root), backend='cpu') for root in sys.argv[1:])\n",
}


@pytest.mark.e2e
@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_two_kernels_with_the_same_class_keep_their_own_static(shared_static, loader):
    """The acceptance of issue 32: each kernel counts on its own, with either loader."""
    for root in shared_static:
        [variant] = (root / "build").iterdir()
        assert check_gnu_unique(variant).status == OK
    script = "import sys\n" + LOADERS[loader] + "print(a.next_count(), a.next_count(), b.next_count(), a.next_count())\n"
    done = subprocess.run([sys.executable, "-c", script, *map(str, shared_static)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "2", "1", "3"]
