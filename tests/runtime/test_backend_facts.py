"""kernel_builder/backend_facts.py, the one record per backend every stage reads (here with
the runtime, its first reader): the records agree with the backend registry, the templates
and the spellings kernels uses, and the runtime's detection reads torch as `kernels` does."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kernel_builder.backend_facts import (
    ALL, BACKENDS, FACTS, NOARCH_BACKENDS, VERSIONED, label, parse_compute, parse_new_compute, torch_backend,
)
from kernel_builder.compile.backends import backend_names, get_backend
from kernel_builder.kernel.manifest import PYTHON_DEPENDS
from kernel_builder.paths import templates_dir


def test_every_record_has_a_backend_class_and_every_class_a_record():
    assert set(backend_names()) == set(BACKENDS)
    assert {name: get_backend(name).compiles for name in FACTS} == {f.name: f.compiled for f in ALL}
    assert set(NOARCH_BACKENDS) == {f.name for f in ALL if not f.compiled}


@pytest.mark.parametrize("record", [f for f in ALL if f.versioned], ids=lambda f: f.name)
@pytest.mark.parametrize("version", [(7, 1), (13, 0), (12, 9), (2026, 0)])
def test_a_compute_tag_spells_its_version_back(record, version):
    tag = record.compute(version)
    if not any(tag == f"{record.compute_prefix}{digits}" for digits, _ in record.odd_tags):
        parsed = parse_compute(tag)
        if parsed is not None:  # a tag outside the backend's digits (xpu71) is no tag
            assert parsed == (record.name, version)
    assert parse_new_compute(f"{record.name}-{version[0]}.{version[1]}") == (record.name, version)


def test_the_spellings_kernels_uses():
    assert [parse_compute(t) for t in ("cpu", "metal", "cu130", "cu126", "rocm71", "rocm714", "xpu20260")] == [
        ("cpu", None), ("metal", None), ("cuda", (13, 0)), ("cuda", (12, 6)), ("rocm", (7, 1)), ("rocm", (7, 14)),
        ("xpu", (2026, 0)),
    ]
    assert parse_compute("tpu") is None and parse_compute("cu1") is None and parse_new_compute("tpu") is None
    assert VERSIONED == ("cuda", "rocm", "xpu")
    assert [label(n) for n in BACKENDS] == ["CPU", "CUDA", "Metal", "ROCm", "XPU"]
    assert label("cuda", (13, 0)) == "CUDA 13.0" and label("mlx") == "mlx"


def test_python_depends_per_backend_as_the_kernels_runtime_has_them():
    assert PYTHON_DEPENDS == {
        None: {"einops", "helion", "tvm-ffi"}, "cuda": {"nvidia-cutlass-dsl"}, "neuron": {"nki"}, "xpu": {"onednn"},
    }


def test_every_compiled_backend_has_an_init_template():
    for record in ALL:
        if record.compiled:
            assert (templates_dir() / "init" / record.template_folder).is_dir(), record.name


def _torch(mps: bool = False, **version):
    fields = {"cuda": None, "hip": None, "xpu": None, **version}
    available = SimpleNamespace(is_available=lambda: mps)
    return SimpleNamespace(version=SimpleNamespace(**fields), backends=SimpleNamespace(mps=available))


@pytest.mark.parametrize(("torch", "expected"), [
    (_torch(), ("cpu", None)),
    (_torch(cuda="13.0"), ("cuda", (13, 0))),
    (_torch(hip="7.1.25424-abc"), ("rocm", (7, 1))),
    (_torch(hip="6.4.1", rocm="7.0.0"), ("rocm", (7, 0))),  # torch.version.rocm, where there is one, wins
    (_torch(mps=True), ("metal", None)),
    (_torch(xpu="20250101"), ("xpu", (2025, 1))),  # kernels takes year [0:4], minor [5:6]
    (_torch(cuda="12.8", mps=True), ("cuda", (12, 8))),  # CUDA before MPS, as kernels decides
])
def test_the_runtime_reads_torch_as_kernels_does(torch, expected):
    assert torch_backend(torch) == expected
