"""Build environments: a Python interpreter with the torch that a variant compiles against.

Probing an environment means reading what its torch's files state (tens of milliseconds),
or importing torch where they do not say it all (seconds). The result is cached and reused
while neither the interpreter nor its torch has changed: that check is two `stat` calls,
which keeps a no-op rebuild well under a second.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from kernel_builder.backend_facts import ALL as ALL_FACTS, FALLBACK
from kernel_builder.paths import cache_dir, short_key
from kernel_builder.errors import EnvironmentProbeError
from kernel_builder.variants import parse_version

# Runs inside the environment; prints one JSON object. What torch's own files state is read
# without importing it (seconds): version.py's values, and the C++ ABI where
# compiled_with_cxx11_abi returns a constant (the torch releases kbuild builds for). Anything
# else, or `import_torch`, imports it.
_PROBE = r"""
import ast, importlib.util, json, os, re, sys, sysconfig

def stated(torch_dir):
    try:
        with open(os.path.join(torch_dir, "version.py")) as f:
            tree = ast.parse(f.read())
        with open(os.path.join(torch_dir, "__init__.py")) as f:
            init = f.read()
        extension = any(name.startswith("_C.") for name in os.listdir(torch_dir))
    except (OSError, SyntaxError, ValueError):
        return None
    values = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, "target", None)
        if isinstance(target, ast.Name) and isinstance(getattr(node, "value", None), ast.Constant):
            values[target.id] = node.value.value
    abi = re.search(r"def compiled_with_cxx11_abi\(\)[^:]*:\s*(r?\"\"\"[\s\S]*?\"\"\"\s*)?return True\b", init)
    if not (extension and abi and isinstance(values.get("__version__"), str) and {"cuda", "hip"} <= values.keys()):
        return None
    return {"torch_version": values["__version__"], "torch_dir": torch_dir, "cxx11_abi": True,
            "cuda": values["cuda"], "hip": values["hip"], "xpu": values.get("xpu")}

def imported():
    try:
        import torch
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}
    return {"torch_version": torch.__version__, "torch_dir": os.path.dirname(torch.__file__),
            "cxx11_abi": bool(torch.compiled_with_cxx11_abi()), "cuda": torch.version.cuda,
            "hip": getattr(torch.version, "hip", None), "xpu": getattr(torch.version, "xpu", None)}

spec = importlib.util.find_spec("torch")
found = None
if sys.argv[1:] != ["--import"] and spec is not None and spec.origin:
    found = stated(os.path.dirname(spec.origin))
found = found or imported()
if "error" not in found:
    found.update(python_version="%d.%d" % sys.version_info[:2], python_include=sysconfig.get_paths()["include"])
print(json.dumps(found))
"""

_PROBE_FORMAT = 1  # bump when the cached fields change


@dataclass(frozen=True)
class BuildEnv:
    """What a build needs to know about its environment's Python and torch."""

    python: str
    python_version: str
    python_include: str
    torch_version: str
    torch_dir: str
    cxx11_abi: bool
    cuda: str | None = None
    hip: str | None = None
    xpu: str | None = None
    # Another architecture's torch (a cross build's, kernel_builder.environments.cross_env):
    # its files are read, its `python` (an emulated interpreter) is run only to import.
    arch: str | None = None

    @property
    def torch(self) -> tuple[int, int]:
        return parse_version(self.torch_version)

    @property
    def include_dirs(self) -> tuple[str, ...]:
        base = Path(self.torch_dir) / "include"
        return (str(base), str(base / "torch" / "csrc" / "api" / "include"))

    @property
    def library_dir(self) -> str:
        return str(Path(self.torch_dir) / "lib")

    @property
    def compute(self) -> str:
        """The accelerator this torch was built for: cpu, cuda, rocm or xpu (the fields are
        the `torch.version` attributes the backends' records name)."""
        return next((f.name for f in ALL_FACTS if f.torch_attribute and getattr(self, f.torch_attribute)), FALLBACK)

    def describe(self) -> str:
        return f"torch {self.torch_version} in {self.python}"


def current_env() -> BuildEnv:
    """The running interpreter as a build environment."""
    return probe_env(Path(sys.executable))


def probe_env(python: Path, cache_file: Path | None = None, import_torch: bool = False) -> BuildEnv:
    """Probe `python`'s torch, reusing the cached answer while nothing changed. The answer
    is kept in `cache_file` (default: kbuild's cache); kbuild's own environments keep it
    inside themselves, so it travels with them (a CI cache restoring one, another kbuild
    cache using it). `import_torch` proves that torch imports (a new environment) instead of
    reading what its files state."""
    python = Path(python)
    if not python.exists():
        raise EnvironmentProbeError(f"build environment {python}: no such interpreter")
    cache_file = cache_file or cache_dir("envs") / f"{short_key(str(python))}.json"
    cached = None if import_torch else _read_cache(cache_file, python)
    if cached is not None:
        return cached
    env = _probe(python, import_torch)
    stamp = {"format": _PROBE_FORMAT, "python_stat": _stat(python), "torch_stat": _torch_stat(env.torch_dir)}
    tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"stamp": stamp, "env": asdict(env)}))
    tmp.replace(cache_file)
    return env


def _probe(python: Path, import_torch: bool) -> BuildEnv:
    try:
        result = subprocess.run(
            [str(python), "-c", _PROBE, *(["--import"] if import_torch else [])], capture_output=True, text=True, timeout=300, check=False
        )
    except OSError as e:
        raise EnvironmentProbeError(f"build environment {python}: cannot run it ({e})") from None
    lines = result.stdout.strip().splitlines()
    try:
        data = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvironmentProbeError(f"build environment {python}: probing torch failed: {tail}") from None
    if "error" in data:
        raise EnvironmentProbeError(
            f"build environment {python} has no usable torch ({data['error']}); "
            f"install one into it, e.g. `{python} -m pip install torch==2.13.0`"
        )
    return BuildEnv(python=str(python), **data)


def _stat(path: Path | str) -> list[int]:
    st = os.stat(path)
    return [st.st_mtime_ns, st.st_size, st.st_ino]


def _torch_stat(torch_dir: str) -> list[int] | None:
    try:
        return _stat(Path(torch_dir) / "version.py")
    except OSError:
        return None


def _read_cache(cache_file: Path, python: Path) -> BuildEnv | None:
    try:
        data = json.loads(cache_file.read_text())
        stamp, env = data["stamp"], BuildEnv(**data["env"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if stamp.get("format") != _PROBE_FORMAT or stamp.get("python_stat") != _stat(python):
        return None
    if stamp.get("torch_stat") is None or stamp["torch_stat"] != _torch_stat(env.torch_dir):
        return None
    return env
