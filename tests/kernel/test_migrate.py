"""`kbuild migrate`: an edition-less or edition-5 build.toml rewritten to edition 6, comments and
formatting kept, refused when the result would not parse; and an edition-6 relu that builds and loads."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copy_example, kbuild, kbuild_in_process, optional_module
from kernel_builder.errors import KbuildError
from kernel_builder.kernel.manifest import load_manifest
from kernel_builder.kernel.migrate import migrate

torch = optional_module("torch")

FIXTURES = Path(__file__).parents[1] / "fixtures"

EDITION5 = """\
# A kernel, with comments that must survive.
[general]
name = "tiny"   # the name
version = 1
edition = 5  # old
license = "MIT"
backends = ["cpu", "cuda"]

[torch]
src = ["torch-ext/torch_binding.cpp"]

[kernel.tiny_cpu]
backend = "cpu"  # keep me
depends = ["torch", "cutlass_4_5"]
src = ["cpu/add.cpp"]

[kernel]
tiny_cuda = { backend = "cuda", depends = [], src = ["cpu/add.cpp"], cuda-capabilities = ["9.0"] }
"""


def repo(tmp_path: Path, toml: str) -> Path:
    """The tiny fixture (edition-less) with `toml` as its build.toml."""
    root = tmp_path / "tiny"
    shutil.copytree(FIXTURES / "tiny", root, ignore=shutil.ignore_patterns("build", "__pycache__"))
    (root / "build.toml").write_text(toml)
    return root


def test_edition5_becomes_edition6_keeping_comments_and_is_idempotent(tmp_path):
    root = repo(tmp_path, EDITION5)
    before = load_manifest(root)
    assert migrate(root).changed
    text = (root / "build.toml").read_text()
    assert text == (
        EDITION5.replace("edition = 5  # old", "edition = 6  # old")
        .replace('backend = "cpu"  # keep me', 'language = "cpp-cpu"  # keep me')
        .replace('{ backend = "cuda"', '{ language = "cpp-cuda"')
    )
    after = load_manifest(root)
    assert after.general.edition == 6
    assert [(u.name, u.backend, u.depends) for u in after.units] == [(u.name, u.backend, u.depends) for u in before.units]
    again = migrate(root)
    assert not again.changed and (root / "build.toml").read_text() == text


def test_edition_less_fixture_gets_an_edition_after_its_name(tmp_path):
    root = repo(tmp_path, (FIXTURES / "tiny" / "build.toml").read_text())
    assert "edition" not in (root / "build.toml").read_text()  # the fixture stays edition-less
    result = migrate(root)
    assert result.old_edition is None
    lines = (root / "build.toml").read_text().splitlines()
    assert lines[lines.index(next(l for l in lines if l.startswith("name ="))) + 1] == "edition = 6"
    assert load_manifest(root).general.edition == 6


SHIPPED = sorted(p.parent for p in [*FIXTURES.glob("*/build.toml"), *(FIXTURES.parents[1] / "examples").glob("*/build.toml")])


def test_migrated_shipped_build_tomls_are_accepted_by_kernels(tmp_path):
    """Every fixture and example, migrated, and `kbuild init`'s output pass kernels 0.19.1's own parser."""
    rust = pytest.importorskip("kernels._rust", reason="kernels 0.19.1 (a test dependency) is not installed: no reference parser")
    from kernel_builder.scaffold.new_kernel import scaffold

    roots = []
    for source in SHIPPED:
        root = shutil.copytree(source, tmp_path / source.name, ignore=shutil.ignore_patterns("build", "__pycache__"))
        migrate(root)
        roots.append(root)
    scaffold(tmp_path / "init", "my-kernel", ["cpu", "cuda", "rocm", "metal", "xpu"])
    for root in [*roots, tmp_path / "init"]:
        assert load_manifest(root).general.edition == 6
        rust.Build.open(str(root))  # raises ValueError with kernels' reason
    assert len(roots) >= 10


def test_check_exit_codes_and_no_write(tmp_path):
    root = repo(tmp_path, EDITION5)
    result = kbuild_in_process("migrate", str(root), "--check")
    assert result.returncode == 1 and "needs migrating" in result.stdout
    assert (root / "build.toml").read_text() == EDITION5
    kbuild_in_process("migrate", str(root), check=True)
    result = kbuild_in_process("migrate", str(root), "--check")
    assert result.returncode == 0 and "already edition 6" in result.stdout


def test_unparseable_result_is_refused_and_original_kept(tmp_path):
    # A triple-quoted backend parses in edition 5, but the line rewrite leaves it as `backend`,
    # which edition 6 rejects: the original must stay.
    toml = EDITION5.replace('backend = "cpu"  # keep me', 'backend = """cpu"""')
    root = repo(tmp_path, toml)
    load_manifest(root)
    with pytest.raises(KbuildError, match="not migrated, the edition-6 result does not parse"):
        migrate(root)
    assert (root / "build.toml").read_text() == toml
    assert not list(root.glob(".build.*"))


def test_cli_missing_build_toml_is_one_line(tmp_path):
    result = kbuild_in_process("migrate", str(tmp_path))
    lines = [l for l in result.stderr.splitlines() if l.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "build.toml: not found" in lines[0]


@pytest.mark.e2e
def test_edition6_relu_builds_its_cpu_variant_and_loads_in_kernels(tmp_path, relu_cpu):
    root = copy_example("relu", tmp_path)
    text = (root / "build.toml").read_text()
    (root / "build.toml").write_text(text.replace("edition = 6\n", "").replace('language = "cpp-', 'backend = "'))
    kbuild("migrate", str(root), check=True)
    assert (root / "build.toml").read_text() == text  # the committed example is what migrate writes
    # So its build is the session's build of examples/relu (conftest.py), not one more.
    variant = "torch{}{}-cxx11-cpu-x86_64-linux".format(*torch.__version__.split(".")[:2])
    assert (relu_cpu / "build" / variant / "metadata.json").is_file()
    root = relu_cpu
    # kernels in a fresh interpreter: kbuild's own loader is not involved.
    code = (
        "import sys, torch, kernels; from pathlib import Path\n"
        "relu = kernels.get_local_kernel(Path(sys.argv[1]), backend='cpu')\n"
        "x = torch.randn(257)\n"
        "torch.testing.assert_close(relu.relu(x), torch.relu(x)); print('ok')\n"
    )
    run = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
