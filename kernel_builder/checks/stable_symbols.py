"""Which of a shared library's imports reach torch outside its stable C shim.

A stable-ABI variant may call torch only through the shim's extern "C" functions: those
torch/csrc/inductor/aoti_torch/c/shim.h (and its generated c_shim_*.h) and
torch/csrc/stable/c/shim.h declare with AOTI_TORCH_EXPORT, all named `aoti_*` or
`torch_*`. Every other torch symbol is C++ whose layout and mangling change between
releases: a name in torch's C++ namespaces (at::, c10::, c10d::, caffe2::, torch::), or a
std:: template instantiated over one of their types, or one of torch_python's `THP*`
globals. What is left (the C and C++ runtimes, Python, the GPU runtime) is not torch's.

The imports are the library's undefined dynamic symbols, read with pyelftools; the rule
works on mangled names, so it needs no demangler, and c++filt (when installed) only makes
the report readable.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SHIM_PREFIXES = ("aoti_", "torch_")
TORCH_NAMESPACES = ("at", "c10", "c10d", "caffe2", "torch")
# An Itanium nested name (N, then cv- and ref-qualifiers) whose outermost scope is one of
# torch's namespaces, as a source name: N3c10..., NK2at...; anywhere in the symbol, so a
# std::vector<c10::IValue> member counts too. A std member named `at` (NSt6vector...2at)
# does not match: the namespace must come first after N.
_TORCH_SCOPE = re.compile("N[rVKRO]*(?:" + "|".join(f"{len(n)}{n}" for n in TORCH_NAMESPACES) + ")")
_TORCH_PYTHON_GLOBALS = "THP"  # torch_python's C-style globals and functions: THPVariableClass


@dataclass(frozen=True)
class TorchImports:
    shim: tuple[str, ...]  # stable C shim functions the library calls
    non_stable: tuple[str, ...]  # torch symbols outside the shim, demangled when c++filt is installed


def undefined_symbols(path: Path) -> tuple[str, ...]:
    """The names of the library's undefined dynamic symbols (what it imports)."""
    from elftools.elf.elffile import ELFFile

    with Path(path).open("rb") as f:
        dynsym = ELFFile(f).get_section_by_name(".dynsym")
        if dynsym is None:
            return ()
        return tuple(sorted({s.name for s in dynsym.iter_symbols() if s.name and s["st_shndx"] == "SHN_UNDEF"}))


def is_shim(name: str) -> bool:
    return not name.startswith("_Z") and name.startswith(SHIM_PREFIXES)


def is_non_stable(name: str) -> bool:
    """Whether an imported symbol is torch's, outside the stable C shim."""
    if name.startswith("_Z"):
        return _TORCH_SCOPE.search(name) is not None
    return name.startswith(_TORCH_PYTHON_GLOBALS)


def demangle(names: list[str]) -> list[str]:
    """C++ names as c++filt prints them; the names unchanged without c++filt."""
    tool = shutil.which("c++filt")
    if tool is None or not names:
        return list(names)
    try:
        done = subprocess.run([tool], input="\n".join(names) + "\n", capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return list(names)
    lines = done.stdout.splitlines()
    return lines if done.returncode == 0 and len(lines) == len(names) else list(names)


def torch_imports(path: Path) -> TorchImports:
    """How the library at `path` reaches torch: shim functions and everything else."""
    names = undefined_symbols(path)
    shim = tuple(n for n in names if is_shim(n))
    non_stable = sorted(demangle([n for n in names if is_non_stable(n)]))
    return TorchImports(shim, tuple(non_stable))
