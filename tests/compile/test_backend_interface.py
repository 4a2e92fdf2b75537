"""The backend interface: the registry, the default hooks every backend inherits, and the
toolchain hook `kbuild doctor` reads (no probing for optional hooks)."""

from __future__ import annotations

import sys

import pytest

from kernel_builder.compile.backends import Backend, Toolchain, Unavailable, backend_names, get_backend, metal, rocm_toolchain, xpu
from kernel_builder.compile.backends.base import dotted, short_version
from kernel_builder.doctor import checkup as doctor
from kernel_builder.environments.probe import BuildEnv
from kernel_builder.errors import KbuildError
from kernel_builder.variants import BACKENDS, NOARCH_BACKENDS, Variant

CPU_TORCH = BuildEnv(sys.executable, "3.12.0", "", "2.13.0", "", True)


class StubBackend(Backend):
    """Only the required hooks: what a new backend must write."""

    name = "stub"
    macro = "STUB_KERNEL"
    tool = "stubcc"
    install = "stubcc"

    def __init__(self, answer: Variant | Unavailable):
        self.answer = answer

    def target(self, manifest, env):
        return self.answer

    def toolchain(self) -> Toolchain:
        return Toolchain(self.tool, missing="no stubcc")

    def toolchain_ids(self) -> tuple[str, ...]:
        return ()

    def compile_spec(self, job):
        raise AssertionError("not compiled in these tests")


# -- the registry -------------------------------------------------------------------------
def test_registry_names_every_backend_in_kbuilds_order():
    assert backend_names() == BACKENDS


def test_each_backend_is_made_once():
    for name in backend_names():
        backend = get_backend(name)
        assert isinstance(backend, Backend) and backend.name == name
        assert get_backend(name) is backend


def test_an_unknown_backend_is_a_one_line_error_naming_the_known_ones():
    with pytest.raises(KbuildError) as e:
        get_backend("npu")
    assert e.value.message == "unknown backend 'npu'; backends are cpu, cuda, metal, rocm, xpu"
    assert e.value.exit_code == 2


@pytest.mark.parametrize("name", NOARCH_BACKENDS)
def test_noarch_only_backends_compile_nothing_and_say_why(name):
    """TPU, Neuron and CANN kernels are [torch-noarch] Python: reachable by name, never judged by
    `kbuild doctor`, and every compiled-variant hook answers in one line."""
    backend = get_backend(name)
    assert name not in backend_names() and not backend.compiles
    reason = backend.target(None, None).reason
    assert f"{name} kernels are Python only ([torch-noarch])" in reason and backend.toolchain().missing == reason
    with pytest.raises(KbuildError, match=r"\[torch-noarch\]"):
        backend.compile_spec(None)


def test_a_backend_without_a_required_hook_cannot_be_made():
    class Incomplete(Backend):
        name = "incomplete"

    with pytest.raises(TypeError):
        Incomplete()


# -- the default hooks --------------------------------------------------------------------
def test_defaults_build_only_in_the_build_environment():
    stub = StubBackend(Unavailable("stub", "no stub torch"))
    assert stub.default_variant(None) is None
    assert stub.device_check_possible() is False
    assert stub.metadata(None) == {}
    with pytest.raises(NotImplementedError):
        stub.device_check(None, None, None)


def test_default_variant_reason_is_the_build_environments_or_that_kbuild_makes_none():
    variant = Variant.parse("torch213-cxx11-cpu-x86_64-linux")
    stub = StubBackend(Unavailable("stub", "no stub torch"))
    assert stub.variant_reason(None, variant, CPU_TORCH) == "no stub torch"
    assert stub.variant_reason(None, variant, None) == "kbuild cannot make a stub build environment"
    buildable = StubBackend(variant)
    assert buildable.variant_reason(None, variant, CPU_TORCH) == "kbuild cannot make a stub build environment"


def test_which_backends_override_the_defaults():
    fallbacks = {n for n in backend_names() if type(get_backend(n)).default_variant is not Backend.default_variant}
    checks = {n for n in backend_names() if type(get_backend(n)).device_check_possible is not Backend.device_check_possible}
    assert fallbacks == {"cpu", "cuda"}
    assert checks == {"rocm"}
    assert get_backend("metal").default_variant(None) is None
    assert get_backend("xpu").device_check_possible() is False


# -- the toolchain hook -------------------------------------------------------------------
def test_a_missing_toolchain_carries_the_backends_reason(monkeypatch):
    monkeypatch.setattr(xpu, "icpx_path", lambda: None)
    monkeypatch.setattr(rocm_toolchain, "hipcc_path", lambda: None)
    assert get_backend("xpu").toolchain() == Toolchain("icpx", missing=xpu.ICPX_MISSING)
    assert get_backend("rocm").toolchain() == Toolchain("hipcc", missing=rocm_toolchain.HIPCC_MISSING)
    found = doctor.toolchain("xpu")
    assert found.status == doctor.MISSING and found.tool == "icpx" and found.reason == xpu.ICPX_MISSING
    assert found.install.startswith(get_backend("xpu").install)


def test_a_found_toolchain_is_reported_as_the_backend_finds_it(monkeypatch):
    monkeypatch.setattr(xpu, "icpx_path", lambda: "/opt/intel/bin/icpx")
    monkeypatch.setattr(xpu, "icpx_version", lambda icpx: (2026, 0))
    found = get_backend("xpu").toolchain()
    assert (found.tool, found.path, found.version, found.missing) == ("icpx", "/opt/intel/bin/icpx", "2026.0", None)

    monkeypatch.setattr(metal.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(metal, "host_platform", lambda: ("aarch64", "darwin"))
    monkeypatch.setattr(metal, "_xcrun", lambda *args: "Apple metal version 32023.830 (metalfe-32023.830.2)")
    found = doctor.toolchain("metal")
    assert found.status == doctor.OK and found.path == "/usr/bin/xcrun"
    assert found.version == "32023.830.2" and found.version_line.startswith("Apple metal")


def test_metal_says_what_is_missing_before_looking_at_the_environment(monkeypatch):
    monkeypatch.setattr(metal.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(metal, "host_platform", lambda: ("x86_64", "linux"))
    assert get_backend("metal").toolchain().missing == "Metal needs macOS with Xcode (this machine runs linux)"


def test_version_spellings():
    assert short_version("g++ (Debian 12.2.0-14) 12.2.0") == "12.2.0"
    assert short_version(None) is None
    assert dotted((13, 0)) == "13.0" and dotted(None) is None
