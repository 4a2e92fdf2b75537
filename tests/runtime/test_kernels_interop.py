"""kbuild's loader and the `kernels` runtime loading one build in one process, in either order,
with kernels 0.19.1 (the dev venv's) and 0.17.2 / 0.18.3 (each pip-installed from the package
index into its own folder that shadows the dev venv's kernels)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import published_kernels

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="session")
def relu_build(relu_cpu) -> Path:
    return relu_cpu  # conftest.py: built once per session, shared with the loader tests


def _run(script: str, shadow: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    if shadow:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (shadow, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, env=env, check=False)


def _runtime(version: str) -> str | None:
    """The folder that shadows the dev venv's kernels with `version` (None: the dev venv's own)."""
    return None if version == "0.19.1" else str(published_kernels(version))


BOTH_ORDERS = """
    import sys, torch
    from pathlib import Path
    from kernel_builder.runtime import load_local
    build, order = Path({build!r}), {order!r}
    if order == "kbuild-before-kernels-import":
        assert "kernels" not in sys.modules
        ours = load_local(build)
    import kernels
    assert kernels.__version__ == {version!r}, kernels.__version__
    if order == "kernels-first":
        theirs = kernels.get_local_kernel(build)
        ours = load_local(build)
    else:
        ours = load_local(build)
        theirs = kernels.get_local_kernel(build)
    x = torch.tensor([-1.0, 2.0])
    assert ours.relu(x).tolist() == [0.0, 2.0]
    assert theirs.relu(x).tolist() == [0.0, 2.0]
    print("same" if ours is theirs else "different")
"""


@pytest.mark.parametrize("version", ["0.19.1", "0.17.2", "0.18.3"])
@pytest.mark.parametrize("order", ["kbuild-first", "kernels-first", "kbuild-before-kernels-import"])
def test_both_loaders_in_one_process(relu_build, version, order):
    shadow = _runtime(version)
    done = _run(BOTH_ORDERS.format(build=str(relu_build), order=order, version=version), shadow)
    assert done.returncode == 0, done.stderr[-3000:]
    # kernels 0.17 re-executes a kernel it did not import itself; 0.18+ reuse the loaded module.
    assert done.stdout.strip() == ("different" if version == "0.17.2" and order != "kernels-first" else "same")


def test_two_unchanged_copies_of_one_build_load_as_one_module(relu_build, tmp_path):
    """The kernel id comes from what the build reads, so a copy of the same variant (a build
    folder, then the Hub's download of it) has the same id: its verified bytes are the same,
    so kbuild's loader gives the module already loaded instead of refusing."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(relu_build / "build", copy / "build")
    script = f"""
        import torch
        from kernel_builder.runtime import load_local
        first, second = load_local({str(relu_build)!r}), load_local({str(copy)!r})
        print("same module:", first is second)
        print("relu:", second.relu(torch.tensor([-1.0, 2.0])).tolist())
    """
    done = _run(script, None)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "same module: True" in done.stdout and "relu: [0.0, 2.0]" in done.stdout, done.stdout


def test_two_builds_with_one_id_are_refused(relu_build, tmp_path):
    """A changed copy of the build under the same id: kbuild loads the original, kernels refuses the copy."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(relu_build / "build", copy / "build")
    variant = next(p for p in (copy / "build").iterdir() if p.is_dir() and "cpu" in p.name)
    init = variant / "__init__.py"
    if not init.is_file():
        init = next(variant.glob("*/__init__.py"))
    init.write_text(init.read_text() + "\n# changed after the build\n")
    script = f"""
        import kernels
        from pathlib import Path
        from kernel_builder.runtime import load_local, KernelLoadError
        load_local({str(relu_build)!r})
        try:
            kernels.get_local_kernel(Path({str(copy)!r}))
        except RuntimeError as e:
            print("kernels refused:", e)
        try:
            load_local({str(copy)!r}, verify=False)
        except KernelLoadError as e:
            print("kbuild refused:", e)
    """
    done = _run(script, None)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "kernels refused:" in done.stdout, done.stdout
    assert "kbuild refused:" in done.stdout and "Kernel ids must be unique" in done.stdout, done.stdout


def test_kernels_describe_api_reads_our_symbols(relu_build):
    """The real `kernels describe-api` (0.19.1) on our build: symbols.json is there, in its schema."""
    import json
    import shutil

    cli = shutil.which("kernels", path=str(Path(sys.executable).parent))
    assert cli, "the dev venv has kernels 0.19.1's CLI"
    done = subprocess.run([cli, "describe-api", str(relu_build), "--json"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["functions"] == [{"name": "relu"}]
    assert info["layers"] == [{"name": "ReLU", "attributes": {"has_backward": False, "can_torch_compile": True}}]
    # kbuild's own key (kernel_builder.assemble.symbols), which kernels passes through.
    assert info["ops"] == [{"name": "relu", "schema": "relu(Tensor! out, Tensor input) -> ()"}]
    shown = subprocess.run([cli, "describe-api", str(relu_build)], capture_output=True, text=True, check=True).stdout
    assert "relu" in shown and "ReLU" in shown and "has_backward=False" in shown
