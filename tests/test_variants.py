"""Variant names: parse and format round-trip every FORMATS.md form; the default matrix."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import kbuild
from kernel_builder.errors import VariantError
from kernel_builder.variants import Kind, Variant, default_matrix, try_parse

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
    "torch-universal": (Kind.NOARCH, "universal", None, None, None, None, None),
}


@pytest.mark.parametrize("name", sorted(FORMS))
def test_parse_and_format_round_trip(name):
    v = Variant.parse(name)
    assert (v.kind, v.backend, v.torch, v.backend_version, v.cxx11, v.arch, v.os) == FORMS[name]
    assert v.name == name and Variant.parse(v.name) == v


@pytest.mark.parametrize("name", ["torch213-cxx11-cu13x-x86_64-linux", "torch-tpu", "flash-attn", "torch213-cxx11-npu-x86_64-linux", "build", ".kbuild-staging-x"])
def test_not_a_variant(name):
    assert try_parse(name) is None
    with pytest.raises(VariantError, match="not a variant name"):
        Variant.parse(name)


def test_our_names_parse_in_the_kernels_runtime():
    # kernels 0.19 moved its modules under kernels._internals (the pinned runtime).
    kv = pytest.importorskip("kernels._internals.variants", reason="the kernels package is the reference parser")
    for name in FORMS:
        assert kv.parse_variant(name).variant_str == name


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
    import torch

    from kernel_builder.backends.cuda import nvcc_path

    result = kbuild("variants", "--json", check=True)
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
        assert "needs CUDA 13.2" in rows["torch214-cxx11-cu132-x86_64-linux"]["reason"]
    else:
        assert "nvcc not found" in cu130["reason"]
    assert "needs platform aarch64-darwin" in rows[f"torch{major}{minor}-metal-aarch64-darwin"]["reason"]
    assert all(r["buildable"] or r["reason"] for r in rows.values())
    # --env pins one environment: variants it cannot build say what it has.
    pinned = {r["variant"]: r for r in json.loads(kbuild("variants", "--json", "--env", sys.executable, check=True).stdout)}
    assert not pinned[f"torch{other}-cxx11-cpu-x86_64-linux"]["buildable"]
    assert f"has torch {torch.__version__}" in pinned[f"torch{other}-cxx11-cpu-x86_64-linux"]["reason"]
