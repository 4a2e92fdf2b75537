"""The import check of a [tvm-ffi] variant: `kernels.get_local_kernel` (the Hugging Face runtime
itself, which picks the variant for this machine, verifies its digests and imports it) loads the
variant in an interpreter with apache-tvm-ffi, and every function the library exports
(`TVM_FFI_DLL_EXPORT_TYPED_FUNC`, a `__tvm_ffi_<name>` symbol) is reachable on `_ops.ops`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from kernel_builder.checks.variant_checks import CheckResult, _failed, _ok, _shown

EXPORT_PREFIX = "__tvm_ffi_"
_TIMEOUT_S = 120
# argv: variant folder, its variant name, the library, the exported function names.
_KERNELS = r"""
import importlib, json, os, sys, tempfile
from pathlib import Path
import kernels
folder, name, functions = sys.argv[1], sys.argv[2], sys.argv[4:]
with tempfile.TemporaryDirectory() as repo:
    (Path(repo) / "build").mkdir()
    os.symlink(folder, Path(repo) / "build" / name)
    kernel = kernels.get_local_kernel(Path(repo))
    ops = importlib.import_module(kernel.__name__ + "._ops").ops
    print(json.dumps({"missing": [f for f in functions if getattr(ops, f, None) is None]}))
"""
# A device variant on a machine without that device: kernels would not pick it, so the
# library alone is opened, as its _ops.py does.
_LIBRARY = r"""
import json, sys
import tvm_ffi
library, functions = sys.argv[3], sys.argv[4:]
ops = tvm_ffi.load_module(library)
print(json.dumps({"missing": [f for f in functions if getattr(ops, f, None) is None]}))
"""


def exported_functions(library: Path) -> tuple[str, ...]:
    """The tvm-ffi functions `library` exports, by name (`__tvm_ffi_relu_cpu` -> relu_cpu)."""
    from elftools.elf.elffile import ELFFile

    with library.open("rb") as f:
        dynsym = next((s for s in ELFFile(f).iter_sections() if s["sh_type"] == "SHT_DYNSYM"), None)
        return tuple(sorted(
            s.name[len(EXPORT_PREFIX):] for s in (dynsym.iter_symbols() if dynsym is not None else ())
            if s.name.startswith(EXPORT_PREFIX) and s["st_shndx"] != "SHN_UNDEF" and s["st_info"]["type"] == "STT_FUNC"
        ))


def check_tvm_ffi_import(folder: Path, variant_name: str, library: Path, python: str, with_kernels: bool = True) -> CheckResult:
    """Load `folder` (staged under any name) as variant `variant_name` with kernels, in `python`;
    without `with_kernels` (a cuda variant where no CUDA GPU is), open its library only."""
    functions = exported_functions(library)
    if not functions:
        return _failed("import", [f"{library.name} exports no tvm-ffi function: export each with TVM_FFI_DLL_EXPORT_TYPED_FUNC"])
    try:
        done = subprocess.run(
            [python, "-c", _KERNELS if with_kernels else _LIBRARY, str(folder.resolve()), variant_name, str(library.resolve()), *functions],
            capture_output=True, text=True, timeout=_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return _failed("import", [f"kernels.get_local_kernel did not finish within {_TIMEOUT_S} s ({python})"])
    how = "kernels.get_local_kernel" if with_kernels else "tvm_ffi.load_module"
    if done.returncode != 0:
        last = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), f"exit status {done.returncode}")
        return _failed("import", [f"{how} failed in {python}: {last.strip()}"])
    missing = json.loads(done.stdout.strip().splitlines()[-1])["missing"]
    if missing:
        return _failed("import", [f"loads, but _ops.ops lacks {_shown(missing)}, which {library.name} exports"])
    where = "" if with_kernels else " (no CUDA GPU here, so kernels would not pick it: the library alone)"
    return _ok("import", f"{how} loads it{where} in {python}; exports {len(functions)} "
               f"function{'s' if len(functions) != 1 else ''}: {_shown(functions)}")
