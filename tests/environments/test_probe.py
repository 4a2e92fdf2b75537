"""Probing a build environment (kernel_builder.environments.probe): what torch's files state is
the answer importing torch gives, without the seconds an import takes; a torch whose files
do not say it all is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import optional_module
from kernel_builder.environments.probe import _PROBE, probe_env


def probe(python: str, *args: str, path: Path | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(path)) if path else None
    done = subprocess.run([python, "-c", _PROBE, *args], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def fake_torch(root: Path, version_py: str, init: str, extension: bool = True) -> Path:
    torch = root / "torch"
    torch.mkdir(parents=True)
    (torch / "version.py").write_text(version_py)
    (torch / "__init__.py").write_text(init)
    if extension:
        (torch / "_C.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    return root


VERSION_PY = """from typing import Optional
__version__ = '2.15.0+cu130'
debug = False
cuda: Optional[str] = '13.0'
hip: Optional[str] = None
xpu: Optional[str] = None
"""
STATES_ITS_ABI = '''
raise ImportError("the probe imported torch")

def compiled_with_cxx11_abi() -> bool:
    r"""Returns whether PyTorch was built with _GLIBCXX_USE_CXX11_ABI=1"""
    return True
'''


def test_what_the_files_state_is_what_importing_torch_says():
    optional_module("torch")
    stated, imported = probe(sys.executable), probe(sys.executable, "--import")
    assert stated == imported
    assert stated["torch_version"].startswith("2.") and stated["cxx11_abi"] is True


def test_a_torch_whose_files_say_it_all_is_not_imported(tmp_path):
    path = fake_torch(tmp_path, VERSION_PY, STATES_ITS_ABI)
    found = probe(sys.executable, path=path)
    assert found["torch_version"] == "2.15.0+cu130" and found["cuda"] == "13.0" and found["hip"] is None
    assert found["torch_dir"] == str(path / "torch") and found["cxx11_abi"] is True
    # Asked to prove it imports, it does: this one does not.
    assert "the probe imported torch" in probe(sys.executable, "--import", path=path)["error"]


@pytest.mark.parametrize("case", ["abi from the extension", "no hip field", "no compiled extension"])
def test_a_torch_whose_files_do_not_say_it_all_is_imported(tmp_path, case):
    version_py, extension = VERSION_PY, case != "no compiled extension"
    init = "from torch import version\n__version__ = '2.15.0+imported'\n"  # tells an imported answer from a stated one
    init += "def compiled_with_cxx11_abi():\n    return " + ("False\n" if case == "abi from the extension" else "True\n")
    if case == "no hip field":
        version_py = version_py.replace("hip: Optional[str] = None\n", "")
    found = probe(sys.executable, path=fake_torch(tmp_path, version_py, init, extension))
    assert found["torch_version"] == "2.15.0+imported"
    assert found["cxx11_abi"] is (case != "abi from the extension")


def test_a_new_environment_is_probed_by_importing_its_torch(tmp_path):
    optional_module("torch")
    cache = tmp_path / "probe.json"
    env = probe_env(Path(sys.executable), cache, import_torch=True)
    assert env == probe_env(Path(sys.executable), cache), "the cached answer is the imported one"
