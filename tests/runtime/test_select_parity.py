"""kbuild's runtime picks variants exactly as `kernels` 0.19.1 does: for a broad set of
variant names of both naming styles and several simulated machines, the same names are
accepted and the accepted ones come in the same order of preference.

The reference is the installed `kernels` package's own resolver
(`kernels._internals.variants._resolve_variant_for_system`), called with the same machine."""

from __future__ import annotations

import itertools

import pytest

from kernel_builder.runtime.select import select_variant
from kernel_builder.runtime.system import System
from kernel_builder.variants import try_parse

kv = pytest.importorskip("kernels._internals.variants", reason="the kernels package is the reference resolver")
kb = pytest.importorskip("kernels._internals.backends")
from packaging.version import Version  # noqa: E402  (kernels depends on packaging)

PLATFORMS = ("x86_64-linux", "aarch64-linux", "aarch64-darwin")
TORCH = ((2, 12), (2, 13), (2, 14), (2, 15))
STABLE_ABI = ((2, 10), (2, 11), (2, 13), (2, 16))
# (legacy compute tag, new-style backend)
COMPUTE = (
    ("cpu", "cpu"), ("metal", "metal"),
    ("cu126", "cuda-12.6"), ("cu128", "cuda-12.8"), ("cu130", "cuda-13.0"), ("cu132", "cuda-13.2"),
    ("rocm70", "rocm-7.0"), ("rocm71", "rocm-7.1"), ("rocm72", "rocm-7.2"), ("rocm714", "rocm-7.14"),
    ("xpu20260", "xpu-2026.0"), ("xpu20261", "xpu-2026.1"),
)
PYTHON_TAGS = ("cpython-3.9-abi3", "cpython-3.10-abi3", "cpython-3.12-abi3", "cpython-3.16-abi3",
               "cpython-3.15-abi3t", "cpython-3.16-abi3t")
NOARCH = ("torch-cpu", "torch-cuda", "torch-rocm", "torch-xpu", "torch-metal", "torch-universal")
# Variants kernels 0.19.1 reads but kbuild neither builds nor loads.
NOT_KBUILD = (
    "tvm-ffi-0.1-cuda-13.0-cpython-3.9-abi3-x86_64-linux", "tvm-ffi01-cu130-x86_64-linux",
    "sdk", "sdk-cuda", "sdk-cpython-3.12-abi3-x86_64-linux", "sdk-cuda-13.0-cpython-3.12-abi3-x86_64-linux",
    "mlx-metal", "torch-npu",
)


def variant_names() -> list[str]:
    names = list(NOARCH)
    for (major, minor), cxx, (legacy, new), platform in itertools.product(TORCH, ("-cxx11", "-cxx98", ""), COMPUTE, PLATFORMS):
        names.append(f"torch{major}{minor}{cxx}-{legacy}-{platform}")
        names += [f"torch-{major}.{minor}{cxx}-{new}-{tag}-{platform}" for tag in PYTHON_TAGS]
    for (major, minor), (legacy, new), platform in itertools.product(STABLE_ABI, COMPUTE, PLATFORMS):
        names.append(f"torch-stable-abi{major}{minor}-{legacy}-{platform}")
        names += [f"torch-stable-abi-{major}.{minor}-{new}-{tag}-{platform}" for tag in PYTHON_TAGS]
    return names


NAMES = variant_names()

SYSTEMS = {
    "linux cpu, python 3.11": System("x86_64", "linux", (2, 13), True, "cpu", python=(3, 11), free_threaded=False),
    "linux cuda 13.0, python 3.12": System("x86_64", "linux", (2, 14), True, "cuda", (13, 0), python=(3, 12), free_threaded=False),
    "linux cuda 13.2, free-threaded 3.15": System("x86_64", "linux", (2, 15), True, "cuda", (13, 2), python=(3, 15), free_threaded=True),
    "arm linux cuda 12.8, free-threaded 3.14": System("aarch64", "linux", (2, 12), True, "cuda", (12, 8), python=(3, 14), free_threaded=True),
    "linux rocm 7.1, cxx98, python 3.9": System("x86_64", "linux", (2, 13), False, "rocm", (7, 1), python=(3, 9), free_threaded=False),
    "linux rocm 7.14, python 3.16": System("x86_64", "linux", (2, 14), True, "rocm", (7, 14), python=(3, 16), free_threaded=False),
    "linux xpu 2026.1, python 3.16": System("x86_64", "linux", (2, 14), True, "xpu", (2026, 1), python=(3, 16), free_threaded=False),
    "macOS 26 metal, python 3.13": System("aarch64", "darwin", (2, 13), None, "metal", macos=(26, 1), python=(3, 13), free_threaded=False),
    "macOS 15 metal": System("aarch64", "darwin", (2, 13), None, "metal", macos=(15, 4), python=(3, 13), free_threaded=False),
    "macOS cpu": System("aarch64", "darwin", (2, 16), None, "cpu", macos=(26, 0), python=(3, 12), free_threaded=False),
    "no torch, python 3.10": System("x86_64", "linux", None, None, "cpu", python=(3, 10), free_threaded=False),
}


def _version(pair: tuple[int, int] | None) -> Version | None:
    return None if pair is None else Version(f"{pair[0]}.{pair[1]}")


def kernels_backend(system: System):
    """The `kernels` backend object for a simulated machine."""
    if system.backend == "cpu":
        return kb.CPU()
    if system.backend == "metal":
        return kb.Metal()
    cls = {"cuda": kb.CUDA, "rocm": kb.ROCm, "xpu": kb.XPU}[system.backend]
    return cls(version=_version(system.backend_version))


def kernels_resolve(names: list[str], system: System) -> tuple[list[str], dict[str, bool]]:
    """(accepted names best first, name -> accepted) by kernels 0.19.1 for `system`."""
    # The runtime keeps the listing's order among equal variants (one build under both
    # naming styles); a sorted listing makes that kbuild's tie-break, by name.
    variants = [kv.parse_variant(n) for n in sorted(names)]
    applicable, trace = kv._resolve_variant_for_system(
        variants=variants,
        selected_backend=kernels_backend(system),
        cpu=system.arch,
        os=system.os,
        torch_version=_version(system.torch),
        torch_cxx11_abi=system.cxx11,
        tvm_ffi_version=None,
        macos_version=_version(system.macos),
        python_version=_version(system.python),
        free_threaded=system.free_threaded,
        has_mlx=False,
    )
    accepted = {d.variant.variant_str: isinstance(d, kv.VariantAccepted) for d in trace}
    return [v.variant_str for v in applicable], accepted


def test_the_grammars_agree():
    """Every generated name that kernels reads, kbuild reads as the same string, and the
    reverse; the only names kbuild leaves to kernels are the families it does not build."""
    for name in NAMES:
        ours = try_parse(name)
        try:
            theirs = kv.parse_variant(name).variant_str
        except ValueError:
            theirs = None
        assert (ours.name if ours else None) == theirs, name
    for name in NOT_KBUILD:
        assert try_parse(name) is None and kv.parse_variant(name).variant_str == name
    readable = [n for n in NAMES if try_parse(n) is not None]
    assert len(readable) > 2000
    assert sum(try_parse(n).new_style for n in readable) > sum(not try_parse(n).new_style for n in readable)


@pytest.mark.parametrize("label", sorted(SYSTEMS))
def test_accepts_and_orders_like_kernels(label):
    system = SYSTEMS[label]
    names = [n for n in NAMES if try_parse(n) is not None]
    theirs_order, theirs_accepted = kernels_resolve(names + list(NOT_KBUILD), system)

    best, trace = select_variant(names + list(NOT_KBUILD), system)
    ours_accepted = {d.name: d.accepted for d in trace}
    assert set(ours_accepted) == set(names)  # tvm-ffi, SDK and MLX folders are ignored
    assert ours_accepted == {n: theirs_accepted[n] for n in names}, label
    ours_order = [d.name for d in trace if d.accepted]
    assert ours_order == [n for n in theirs_order if n in ours_accepted]
    assert (best.name if best else None) == (ours_order[0] if ours_order else None)
    assert ours_order, f"the generated names should offer {label} something"
    assert any(not d.accepted for d in trace)
