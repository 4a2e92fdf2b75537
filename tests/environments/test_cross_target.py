"""aarch64-linux variants from an x86_64 machine, without building: the route each platform
takes, the store key of torch's aarch64 environment, the cross compile's flags and toolchain
file, the emulated Python's launcher, the `arch` check, and what plan and doctor say.
The builds and the emulated runs are in tests/pipeline/test_aarch64.py."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import EXAMPLES, kbuild_in_process
from cuda_toolkit import needs_nvcc
from kernel_builder.checks.variant_checks import check_machine
from kernel_builder.compile.backends.cpu import unit_flags
from kernel_builder.environments import cross_env, cross_target, emulation_root
from kernel_builder.environments.cross_target import TARGETS, Route
from kernel_builder.environments.probe import BuildEnv
from kernel_builder.environments.store import EnvSpec
from kernel_builder.variants import Variant

AARCH64 = TARGETS["aarch64"]
APT = "apt-get install g++-aarch64-linux-gnu qemu-user-static"


@pytest.fixture
def host(monkeypatch):
    """Pretend to be another machine: host("aarch64")."""
    def be(arch: str, os_: str = "linux") -> None:
        monkeypatch.setattr(cross_target, "host_platform", lambda: (arch, os_))
    return be


def test_aarch64_linux_is_cross_built_on_x86_64_and_native_on_aarch64(host):
    host("x86_64")
    assert cross_target.route("aarch64-linux") is Route.CROSS
    assert cross_target.route("x86_64-linux") is Route.NATIVE and cross_target.route(None) is Route.NATIVE
    assert cross_target.route("aarch64-darwin") is None
    assert cross_target.describe_route("aarch64-darwin") == "no route from this machine"
    host("aarch64")
    assert cross_target.route("aarch64-linux") is Route.NATIVE
    assert cross_target.route("x86_64-linux") is None  # no x86_64 cross route from aarch64
    host("x86_64", "darwin")
    assert cross_target.route("aarch64-linux") is None


def test_the_aarch64_environment_has_its_own_store_key_only_where_it_is_cross_built(host):
    variant = Variant.parse("torch214-cxx11-cpu-aarch64-linux")
    host("x86_64")
    spec = EnvSpec.for_variant(variant)
    assert spec.key == "torch214-cpu-aarch64" and spec.describe() == "torch 2.14 (CPU) for aarch64"
    assert EnvSpec.from_key(spec.key) == spec and EnvSpec.parse(variant.name) == spec
    # This machine's torch never stands in for an aarch64 one, nor the other way round.
    here = BuildEnv("python", "3.11", "inc", "2.14.1", "/t", True)
    assert not spec.satisfied_by(here) and spec.satisfied_by(BuildEnv("p", "3.11", "inc", "2.14.1", "/t", True, arch="aarch64"))
    assert not EnvSpec((2, 14), "cpu").satisfied_by(BuildEnv("p", "3.11", "inc", "2.14.1", "/t", True, arch="aarch64"))
    host("aarch64")
    assert EnvSpec.for_variant(variant).key == "torch214-cpu"  # natively: an ordinary environment


def test_the_cpu_and_cuda_aarch64_variants_share_one_environment(tmp_path, monkeypatch, host):
    """PyPI's aarch64 torch is one CUDA 13.0 build: made for the CPU variant, it serves the
    CUDA variant too (and the other way round), under one creation lock per torch and arch."""
    from kernel_builder.environments import store

    host("x86_64")
    monkeypatch.setenv("KBUILD_ENVS_DIR", str(tmp_path))
    site = tmp_path / "torch214-cpu-aarch64" / "site"
    made = BuildEnv(str(site.parent / "bin" / "python"), "3.11", "inc", "2.14.1", str(site / "torch"), True,
                    cuda="13.0", arch="aarch64")
    site.mkdir(parents=True)
    (site.parent / store.MARKER).write_text(json.dumps({"env": made.__dict__}))
    cpu, cuda = EnvSpec((2, 14), "cpu", "aarch64"), EnvSpec((2, 14), "cu130", "aarch64")
    assert store.find_env(cpu) == made and store.find_env(cuda) == made
    assert store.find_env(EnvSpec((2, 14), "cu126", "aarch64")) is None  # another flavour: its own
    assert store.find_env(EnvSpec((2, 14), "cu130")) is None  # never this machine's
    assert store._lock_key(cpu) == store._lock_key(cuda) == "torch214-aarch64"
    shutil.move(site.parent, tmp_path / cuda.key)  # made for the CUDA variant first
    assert store.find_env(cpu) == made and store.find_env(cuda) == made


def test_a_python_root_made_before_a_package_was_added_is_made_again(tmp_path):
    """The root holds libgomp1 (kbuild's CPU units need libgomp.so.1, which torch 2.9's aarch64
    wheel bundles only under another name): a root whose marker lacks it is not ready."""
    root = emulation_root.root_path(AARCH64, tmp_path)
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "python3.11").write_text("")
    marker = root.with_name(root.name + ".json")
    assert "libgomp1" in emulation_root.PACKAGES and not emulation_root.ready(AARCH64, tmp_path)
    marker.write_text(json.dumps({"packages": ["python3.11"]}))
    assert not emulation_root.ready(AARCH64, tmp_path)
    marker.write_text(json.dumps({"packages": list(emulation_root.PACKAGES)}))
    assert emulation_root.ready(AARCH64, tmp_path)


def test_wheels_are_fetched_for_every_glibc_manylinux_2_28_admits():
    tags = AARCH64.pip_platforms()
    assert tags[0] == "manylinux_2_28_aarch64" and tags[-1] == "manylinux2014_aarch64"
    assert "manylinux_2_17_aarch64" in tags and len(tags) == 13  # 2.28 down to 2.17, then the 2014 alias


def test_x86_instruction_set_flags_stay_out_of_aarch64_units():
    flags = ("-mavx512f", "-mavx512bw", "-mfma", "-mno-avx2", "-ffp-contract=off", "-DX=1", "-mcpu=native")
    assert unit_flags(flags, "x86_64") == flags and unit_flags(flags, None) == flags
    assert unit_flags(flags, "aarch64") == ("-ffp-contract=off", "-DX=1", "-mcpu=native")


def test_the_toolchain_file_names_the_target_and_is_rewritten_only_on_change(tmp_path):
    path = cross_target.toolchain_file(AARCH64, tmp_path)
    text = path.read_text()
    assert "set(CMAKE_SYSTEM_NAME Linux)" in text and "set(CMAKE_SYSTEM_PROCESSOR aarch64)" in text
    assert "aarch64-linux-gnu-g++" in text and "aarch64-linux-gnu-gcc" in text
    before = path.stat().st_mtime_ns
    assert cross_target.toolchain_file(AARCH64, tmp_path).stat().st_mtime_ns == before


def test_the_launcher_runs_the_root_python_under_qemu_as_a_venv_over_the_target_wheels(tmp_path):
    root, env = tmp_path / "root", tmp_path / "env"
    emulation_root.write_launcher(AARCH64, root, env / "bin" / "python", [env / "site", env / "emulated"])
    script = (env / "bin" / "python").read_text()
    assert f"-L {root}" in script and '-0 "$0"' in script and f"{root}/usr/bin/python3.11" in script
    assert "qemu-aarch64-static" in script and (env / "bin" / "python").stat().st_mode & 0o111
    assert f"home = {root}/usr/bin" in (env / "pyvenv.cfg").read_text()
    pth = env / "lib" / "python3.11" / "site-packages" / "_kbuild_target_wheels.pth"
    assert pth.read_text().splitlines() == [str(env / "site"), str(env / "emulated")]


def test_torch_needs_are_its_requirements_for_linux_on_the_target(tmp_path):
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch-2.14.1.dist-info").mkdir()
    (site / "torch-2.14.1.dist-info" / "METADATA").write_text(
        "Name: torch\nRequires-Dist: filelock\n"
        'Requires-Dist: nvidia-cudnn-cu13==9.24.0.43; platform_system == "Linux"\n'
        'Requires-Dist: intel-only; platform_machine == "x86_64"\n'
        'Requires-Dist: opt-einsum>=3.3; extra == "opt-einsum"\n'
    )
    env = BuildEnv("p", "3.11", "inc", "2.14.1", str(site / "torch"), True, arch="aarch64")
    assert cross_env.emulation_requirements(env) == ["filelock", "nvidia-cudnn-cu13==9.24.0.43", *cross_env.EMULATED_EXTRAS]


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-gcc") is None, reason="no aarch64 cross compiler: apt-get install g++-aarch64-linux-gnu")
def test_the_arch_check_reads_each_librarys_elf_machine(tmp_path):
    source = tmp_path / "x.c"
    source.write_text("int f(void) { return 1; }\n")
    for name in ("torch214-cxx11-cpu-aarch64-linux", "torch214-cxx11-cpu-x86_64-linux"):
        (tmp_path / name).mkdir()
        subprocess.run(["aarch64-linux-gnu-gcc", "-shared", "-fPIC", "-o", str(tmp_path / name / "_x.abi3.so"), str(source)], check=True)
    ok = check_machine(tmp_path / "torch214-cxx11-cpu-aarch64-linux", Variant.parse("torch214-cxx11-cpu-aarch64-linux"))
    assert ok.status == "ok" and ok.detail == "aarch64 code (1 library)"
    wrong = check_machine(tmp_path / "torch214-cxx11-cpu-x86_64-linux", Variant.parse("torch214-cxx11-cpu-x86_64-linux"))
    assert wrong.status == "failed" and wrong.findings == ("_x.abi3.so is aarch64 code, not x86_64",)


def test_plan_and_doctor_name_the_apt_command_when_the_cross_compiler_is_missing(tmp_path, monkeypatch, host):
    host("x86_64")
    monkeypatch.setenv("PATH", str(tmp_path))  # no compiler, no qemu
    result = kbuild_in_process("plan", str(EXAMPLES / "swiglu"), "--matrix", "arch=aarch64 os=linux backend=cpu torch=2.14", "--json")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert row["variant"] == "torch214-cxx11-cpu-aarch64-linux" and not row["buildable"]
    assert row["reason"] == f"no aarch64 cross compiler (aarch64-linux-gnu-g++): {APT}"
    from kernel_builder.doctor.checkup import other_platforms

    (finding,) = [p for p in other_platforms() if p.platform == "aarch64-linux"]
    assert not finding.buildable and finding.install == APT
    assert finding.route.startswith("cross (aarch64-linux-gnu-g++")


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None, reason="no aarch64 cross compiler: apt-get install g++-aarch64-linux-gnu")
@needs_nvcc
def test_plan_says_the_cross_route_of_each_aarch64_cpu_and_cuda_variant(host):
    host("x86_64")
    result = kbuild_in_process("plan", str(EXAMPLES / "swiglu"), "--matrix", "arch=aarch64 torch=2.14 backend=cpu,cuda", "--json")
    assert result.returncode == 0, result.stderr
    rows = {r["variant"]: r for r in json.loads(result.stdout)}
    cpu = rows["torch214-cxx11-cpu-aarch64-linux"]
    assert cpu["buildable"] and cpu["environment"].startswith("managed torch214-")
    assert "cross (aarch64-linux-gnu-g++; import check and tests under qemu-aarch64-static emulation, slow)" in cpu["environment"]
    cuda = rows["torch214-cxx11-cu130-aarch64-linux"]
    # CUDA too (kernel_builder/environments/cuda_cross.py): this machine's nvcc with NVIDIA's aarch64 wheels.
    assert cuda["buildable"] and "cross (aarch64-linux-gnu-g++" in cuda["environment"], cuda
    assert "nvcc 13.0" in cuda["environment"] and "NVIDIA's aarch64 CUDA 13.0 wheels" in cuda["environment"], cuda


def test_plan_says_when_only_the_emulator_is_missing(tmp_path, monkeypatch, host):
    host("x86_64")
    compiler = tmp_path / "aarch64-linux-gnu-g++"
    compiler.write_text("#!/bin/sh\nexit 0\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))  # the cross compiler, no qemu
    result = kbuild_in_process("plan", str(EXAMPLES / "swiglu"), "--matrix", "arch=aarch64 os=linux backend=cpu torch=2.14", "--json")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert row["buildable"], row  # it builds; only its import check and tests need qemu
    assert row["environment"].endswith(
        f"; no aarch64 emulator (qemu-aarch64-static) for the import check and tests: {APT} (or build with --no-import-check)")
