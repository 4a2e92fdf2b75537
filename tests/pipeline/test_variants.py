"""Variant names: parse and format round-trip every FORMATS.md form of both naming styles;
the default matrix; `kbuild build --variant-names new` end to end."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, kbuild, kbuild_in_process, optional_module
from kernel_builder.errors import VariantError
from kernel_builder.variants import Kind, Style, Variant, default_matrix, try_parse

FORMS = {
    "torch213-cxx11-cpu-x86_64-linux": (Kind.ARCH, "cpu", (2, 13), None, True, "x86_64", "linux"),
    "torch214-cxx11-cu130-x86_64-linux": (Kind.ARCH, "cuda", (2, 14), (13, 0), True, "x86_64", "linux"),
    "torch213-cxx11-cu126-aarch64-linux": (Kind.ARCH, "cuda", (2, 13), (12, 6), True, "aarch64", "linux"),
    "torch213-cxx11-rocm71-x86_64-linux": (Kind.ARCH, "rocm", (2, 13), (7, 1), True, "x86_64", "linux"),
    "torch213-cxx11-xpu20260-x86_64-linux": (Kind.ARCH, "xpu", (2, 13), (2026, 0), True, "x86_64", "linux"),
    "torch213-metal-aarch64-darwin": (Kind.ARCH, "metal", (2, 13), None, None, "aarch64", "darwin"),
    "torch210-cpu-aarch64-darwin": (Kind.ARCH, "cpu", (2, 10), None, None, "aarch64", "darwin"),
    "torch29-cxx98-cu118-x86_64-linux": (Kind.ARCH, "cuda", (2, 9), (11, 8), False, "x86_64", "linux"),
    "torch-stable-abi210-cu130-x86_64-linux": (Kind.STABLE_ABI, "cuda", (2, 10), (13, 0), None, "x86_64", "linux"),
    "torch-stable-abi211-cpu-aarch64-darwin": (Kind.STABLE_ABI, "cpu", (2, 11), None, None, "aarch64", "darwin"),
    "torch-cpu": (Kind.NOARCH, "cpu", None, None, None, None, None),
    "torch-cuda": (Kind.NOARCH, "cuda", None, None, None, None, None),
    "torch-tpu": (Kind.NOARCH, "tpu", None, None, None, None, None),  # noarch-only backends (kernels#714)
    "torch-universal": (Kind.NOARCH, "universal", None, None, None, None, None),
    "torch213-cxx11-rocm714-x86_64-linux": (Kind.ARCH, "rocm", (2, 13), (7, 14), True, "x86_64", "linux"),
}
# New-style names (kernels >= 0.19): the same fields, plus the Python tag they spell.
NEW_FORMS = {
    "torch-2.15-cxx11-cuda-13.0-cpython-3.10-abi3-x86_64-linux":
        (Kind.ARCH, "cuda", (2, 15), (13, 0), True, "x86_64", "linux", (3, 10), "abi3"),
    "torch-2.13-cxx11-cpu-cpython-3.9-abi3-x86_64-linux":
        (Kind.ARCH, "cpu", (2, 13), None, True, "x86_64", "linux", (3, 9), "abi3"),
    "torch-stable-abi-2.11-cuda-13.0-cpython-3.9-abi3-x86_64-linux":
        (Kind.STABLE_ABI, "cuda", (2, 11), (13, 0), None, "x86_64", "linux", (3, 9), "abi3"),
    "torch-2.14-cxx11-rocm-7.2-cpython-3.9-abi3-x86_64-linux":
        (Kind.ARCH, "rocm", (2, 14), (7, 2), True, "x86_64", "linux", (3, 9), "abi3"),
    "torch-2.14-cxx11-xpu-2026.1-cpython-3.9-abi3-x86_64-linux":
        (Kind.ARCH, "xpu", (2, 14), (2026, 1), True, "x86_64", "linux", (3, 9), "abi3"),
    "torch-2.13-metal-cpython-3.9-abi3-aarch64-darwin":
        (Kind.ARCH, "metal", (2, 13), None, None, "aarch64", "darwin", (3, 9), "abi3"),
    "torch-2.16-cxx11-cpu-cpython-3.15-abi3t-x86_64-linux":
        (Kind.ARCH, "cpu", (2, 16), None, True, "x86_64", "linux", (3, 15), "abi3t"),
    "torch-10.2-cpu-cpython-3.12-abi3-aarch64-darwin":
        (Kind.ARCH, "cpu", (10, 2), None, None, "aarch64", "darwin", (3, 12), "abi3"),
}


def _fields(v: Variant) -> tuple:
    return (v.kind, v.backend, v.torch, v.backend_version, v.cxx11, v.arch, v.os)


@pytest.mark.parametrize("name", sorted(FORMS))
def test_parse_and_format_round_trip(name):
    v = Variant.parse(name)
    assert _fields(v) == FORMS[name]
    assert v.name == name and Variant.parse(v.name) == v
    # Legacy names carry no Python tag: the runtime reads them as cpython-3.9-abi3.
    assert v.style is Style.LEGACY and not v.new_style and (v.python, v.python_abi) == ((3, 9), "abi3")


@pytest.mark.parametrize("name", sorted(NEW_FORMS))
def test_new_style_names_round_trip(name):
    v = Variant.parse(name)
    assert (*_fields(v), v.python, v.python_abi) == NEW_FORMS[name]
    assert v.name == name and Variant.parse(v.name) == v and try_parse(name) == v
    assert v.style is Style.NEW and v.new_style


def test_one_build_in_both_styles():
    legacy = Variant.parse("torch214-cxx11-cu130-x86_64-linux")
    new = legacy.with_style(Style.NEW)
    assert new.name == "torch-2.14-cxx11-cuda-13.0-cpython-3.9-abi3-x86_64-linux"
    assert legacy.other_style() == new and new.other_style() == legacy and new != legacy
    assert new.compute == legacy.compute == "cu130"  # the build environment's key is the same
    stable = Variant.parse("torch-stable-abi210-cu130-x86_64-linux").with_style(Style.NEW)
    assert stable.name == "torch-stable-abi-2.10-cuda-13.0-cpython-3.9-abi3-x86_64-linux"
    # Noarch names are the same in both styles: never new-style, no twin.
    cpu = Variant.parse("torch-cpu")
    assert cpu.with_style(Style.NEW) is cpu and cpu.other_style() is None and not cpu.new_style
    # A Python tag the legacy style cannot spell has no legacy twin.
    py310 = Variant.parse("torch-2.15-cxx11-cuda-13.0-cpython-3.10-abi3-x86_64-linux")
    assert py310.other_style() is None
    with pytest.raises(VariantError, match="legacy variant name cannot say cpython-3.10-abi3"):
        py310.with_style(Style.LEGACY)


@pytest.mark.parametrize("name", [
    "torch213-cxx11-cu13x-x86_64-linux", "torch-npu", "flash-attn", "torch213-cxx11-npu-x86_64-linux", "build",
    ".kbuild-staging-x", "torch-2.13-cxx11-cpu-x86_64-linux", "torch-2.13-cxx11-cu130-cpython-3.9-abi3-x86_64-linux",
    "torch-2.13-cxx11-cuda130-cpython-3.9-abi3-x86_64-linux", "torch-2.13-cxx11-cpu-cpython-3.9-abi4-x86_64-linux",
    "torch-2.013-cxx11-cpu-cpython-3.9-abi3-x86_64-linux", "torch2013-cxx11-cpu-x86_64-linux",
    "tvm-ffi-0.1-cuda-13.0-cpython-3.9-abi3-x86_64-linux", "sdk-cpython-3.12-abi3-x86_64-linux", "mlx-metal",
])
def test_not_a_variant(name):
    assert try_parse(name) is None
    with pytest.raises(VariantError, match="not a variant name") as raised:
        Variant.parse(name)
    # The error shows both naming styles.
    assert "torch213-cxx11-cpu-x86_64-linux" in raised.value.message
    assert "torch-2.13-cxx11-cpu-cpython-3.9-abi3-x86_64-linux" in raised.value.message


def test_a_contradictory_python_tag_says_what_is_wrong():
    name = "torch-2.16-cxx11-cpu-cpython-3.12-abi3t-x86_64-linux"
    assert try_parse(name) is None
    with pytest.raises(VariantError, match="abi3t needs Python 3.15 or later, not 3.12"):
        Variant.parse(name)


def test_our_names_parse_in_the_kernels_runtime():
    # kernels 0.19 moved its modules under kernels._internals (the pinned runtime).
    kv = pytest.importorskip("kernels._internals.variants", reason="the kernels package is the reference parser")
    for name in (*FORMS, *NEW_FORMS):
        assert kv.parse_variant(name).variant_str == name
    for name, fields in NEW_FORMS.items():
        python = kv.parse_variant(name).python
        assert (str(python.version), python.abi) == (f"{fields[7][0]}.{fields[7][1]}", fields[8])
    for name in FORMS:
        if try_parse(name).kind is not Kind.NOARCH:  # legacy names count as cpython-3.9-abi3
            assert kv.parse_variant(name).python.variant_str == "" and str(kv.parse_variant(name).python.version) == "3.9"


def test_the_name_says_the_python_our_libraries_need():
    """New-style names say cpython-3.9-abi3 because every backend compiles with
    Py_LIMITED_API 3.9 (the abi3 stable ABI), the Python a legacy name implies."""
    from kernel_builder.compile.backends.common import PY_LIMITED_API
    from kernel_builder.variants import LEGACY_PYTHON

    major, minor = LEGACY_PYTHON
    assert int(PY_LIMITED_API, 16) == (major << 24) | (minor << 16)
    assert Variant.parse("torch213-cxx11-cpu-x86_64-linux").with_style(Style.NEW).python_tag == "cpython-3.9-abi3"


def test_default_matrix_covers_the_compliant_set():
    names = {v.name for v in default_matrix().variants}
    for torch in ("212", "213", "214"):
        assert f"torch{torch}-cxx11-cpu-x86_64-linux" in names
        assert f"torch{torch}-metal-aarch64-darwin" in names
    for cu in ("cu126", "cu130", "cu132"):
        assert f"torch214-cxx11-{cu}-x86_64-linux" in names
    assert {"torch213-cxx11-rocm71-x86_64-linux", "torch214-cxx11-rocm72-x86_64-linux"} <= names
    # kernel-builder's versions.nix: torch 2.12 has CUDA 13.2 and ROCm 7.2 too; XPU follows torch.
    assert {"torch212-cxx11-cu132-aarch64-linux", "torch212-cxx11-rocm72-x86_64-linux"} <= names
    xpu = {n for n in names if "-xpu" in n}
    assert xpu == {"torch212-cxx11-xpu20253-x86_64-linux", "torch213-cxx11-xpu20260-x86_64-linux",
                   "torch214-cxx11-xpu20261-x86_64-linux"}
    # torch 2.15 is experimental: listed in matrix.toml, not in the default matrix.
    assert not any(n.startswith("torch215") for n in names)
    assert len(names) == len(default_matrix().variants)


def test_variants_command_marks_what_this_machine_builds_and_where():
    optional_module("torch")
    import torch

    from kernel_builder.compile.backends.cuda import nvcc_path

    result = kbuild_in_process("variants", "--json", check=True)
    rows = {r["variant"]: r for r in json.loads(result.stdout)}
    major, minor = torch.__version__.split(".")[:2]
    here = rows[f"torch{major}{minor}-cxx11-cpu-x86_64-linux"]
    assert here["buildable"] and here["environment"].startswith("this interpreter: torch " + torch.__version__)
    # Another torch is built in a managed environment, found or created on first build.
    other = "212" if f"{major}{minor}" != "212" else "214"
    managed = rows[f"torch{other}-cxx11-cpu-x86_64-linux"]
    assert managed["buildable"] and managed["environment"].startswith(f"managed torch{other}-cpu")
    cu130 = rows["torch214-cxx11-cu130-x86_64-linux"]
    if nvcc_path():
        assert cu130["buildable"] and "managed torch214-cu130" in cu130["environment"]
        # nvcc 13.0 builds only the cu130 variants: each variant is compiled by its own CUDA release.
        assert "nvcc must be the variant's CUDA release" in rows["torch214-cxx11-cu126-x86_64-linux"]["reason"]
        assert f"nvcc 13.0 at {nvcc_path()}" in cu130["environment"]
    # CUDA 13.x without a system toolkit of its release: nvcc from NVIDIA's wheels.
    cu132 = rows["torch214-cxx11-cu132-x86_64-linux"]
    assert cu132["buildable"] and "nvcc 13.2 from NVIDIA's wheels" in cu132["environment"], cu132
    # CUDA 12 has no such wheels: a system toolkit of the release or nothing.
    assert not rows["torch214-cxx11-cu126-x86_64-linux"]["buildable"]
    assert "needs platform aarch64-darwin" in rows[f"torch{major}{minor}-metal-aarch64-darwin"]["reason"]
    assert all(r["buildable"] or r["reason"] for r in rows.values())
    # --env pins one environment: variants it cannot build say what it has.
    pinned = {r["variant"]: r for r in json.loads(kbuild_in_process("variants", "--json", "--env", sys.executable, check=True).stdout)}
    assert not pinned[f"torch{other}-cxx11-cpu-x86_64-linux"]["buildable"]
    assert f"has torch {torch.__version__}" in pinned[f"torch{other}-cxx11-cpu-x86_64-linux"]["reason"]


# -- kbuild build --variant-names new, end to end ---------------------------------------
TINY = REPO / "tests" / "fixtures" / "tiny"


@pytest.fixture(scope="module")
def tiny_new(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-new") / "tiny"
    shutil.copytree(TINY, root)
    kbuild("build", str(root), "--variant-names", "new", check=True)
    return root


def _torch_tag() -> tuple[str, str]:
    import torch

    major, minor = torch.__version__.split(".")[:2]
    return major, minor


@pytest.mark.e2e
def test_build_names_new_style_and_both_runtimes_load_it(tiny_new):
    major, minor = _torch_tag()
    name = f"torch-{major}.{minor}-cxx11-cpu-cpython-3.9-abi3-x86_64-linux"
    assert [p.name for p in (tiny_new / "build").iterdir()] == [name]
    metadata = json.loads((tiny_new / "build" / name / "metadata.json").read_text())
    assert metadata["kbuild"]["variant"] == name
    assert metadata["kernels-minver"] == "0.19.1", "older kernels cannot read the name"
    # kernels 0.19.1 and kbuild's loader pick that folder and load it, in one fresh process
    # (this one may hold the legacy-named build of the same sources under the same id).
    script = (
        "import sys, torch, kernels\n"
        "from pathlib import Path\n"
        "from kernel_builder.runtime.loader import load_local\n"
        "root = Path(sys.argv[1])\n"
        "theirs = kernels.get_local_kernel(root, backend='cpu')\n"
        "ours = load_local(root, backend='cpu')\n"
        "x = torch.randn(4, 3)\n"
        "torch.testing.assert_close(theirs.add_one(x), x + 1)\n"
        "torch.testing.assert_close(ours.add_one(x), x + 1)\n"
        "print(theirs.__name__, ours.__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tiny_new)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [metadata["id"], metadata["id"]]


@pytest.mark.e2e
def test_switching_styles_leaves_one_folder_per_build(tiny_new):
    major, minor = _torch_tag()
    legacy, new = f"torch{major}{minor}-cxx11-cpu-x86_64-linux", f"torch-{major}.{minor}-cxx11-cpu-cpython-3.9-abi3-x86_64-linux"
    # The default (legacy) build replaces the new-style folder of the same build; both
    # names share one work tree, so the rename recompiles nothing.
    result = kbuild("build", str(tiny_new), "--json", check=True)
    job = {r["variant"]: r for r in json.loads(result.stdout)["jobs"]}[legacy]
    assert job["status"] == "built"
    assert [p.name for p in (tiny_new / "build").iterdir()] == [legacy]
    assert "no work to do" in Path(job["log"]).read_text()
    assert "kernels-minver" not in json.loads((tiny_new / "build" / legacy / "metadata.json").read_text())
    # A build with --variant names it as spelled, whichever style (the fixture's again).
    kbuild("build", str(tiny_new), "--variant", new, check=True)
    assert [p.name for p in (tiny_new / "build").iterdir()] == [new]


def test_variant_name_mistakes_are_one_line_errors(tmp_path):
    optional_module("torch")
    major, minor = _torch_tag()
    new = f"torch-{major}.{minor}-cxx11-cpu-cpython-3.9-abi3-x86_64-linux"
    legacy = f"torch{major}{minor}-cxx11-cpu-x86_64-linux"
    cases = {
        # kbuild's libraries need Python 3.9's limited API; a name must not promise another Python.
        ("--variant", new.replace("3.9", "3.12")): "so its builds are cpython-3.9-abi3, not cpython-3.12-abi3",
        ("--variant", legacy, "--variant-names", "new"): f"is a legacy-style name, but --variant-names is new; ask for {new}",
        ("--variant", new, "--variant", legacy): "are one build under two names",
        ("--variant-names", "newest"): "--variant-names must be 'legacy' or 'new'",
    }
    for args, message in cases.items():
        result = kbuild_in_process("build", str(TINY), "--out", str(tmp_path / "out"), *args)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
