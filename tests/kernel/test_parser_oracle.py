"""kbuild's build.toml verdict (accept / refuse) equals the reference parser's, kernels 0.19.1's
`kernels._rust.Build.open`, over a corpus that touches every field, edition and framework.

Each case is a build.toml text; the test lays out the files it names (sources, include folders,
the torch-ext package) so that only the schema decides. A refusal must be one line naming the field.
"""

from __future__ import annotations

import io
import os
import tomllib
from contextlib import redirect_stderr
from pathlib import Path

import pytest

from kernel_builder.errors import ManifestError
from kernel_builder.kernel.manifest import load_manifest

rust = pytest.importorskip("kernels._rust", reason="kernels 0.19.1 (a test dependency) is not installed: no reference parser")

GENERAL6 = 'name = "my-kernel"\nversion = 1\nedition = 6\nlicense = "apache-2.0"\n'
GENERAL5 = 'name = "my-kernel"\nversion = 1\nedition = 5\nlicense = "apache-2.0"\n'
GENERAL4 = 'name = "my-kernel"\nversion = 1\nlicense = "apache-2.0"\n'
TORCH = '[torch]\nsrc = ["torch-ext/torch_binding.cpp"]\n'
CPU6 = '[kernel.k_cpu]\nlanguage = "cpp-cpu"\ndepends = ["torch"]\nsrc = ["cpu/k.cpp"]\n'
CPU5 = '[kernel.k_cpu]\nbackend = "cpu"\ndepends = ["torch"]\nsrc = ["cpu/k.cpp"]\n'


def e6(general: str = "", body: str = TORCH + CPU6, backends: str = '["cpu"]') -> str:
    return f"[general]\n{GENERAL6}backends = {backends}\n{general}\n{body}"


def e5(general: str = "", body: str = TORCH + CPU5, backends: str = '["cpu"]') -> str:
    return f"[general]\n{GENERAL5}backends = {backends}\n{general}\n{body}"


def e4(general: str = "", body: str = TORCH + CPU5, backends: str = '["cpu"]') -> str:
    return f"[general]\n{GENERAL4}backends = {backends}\n{general}\n{body}"


def unit6(language: str, extra: str = "", depends: str = '["torch"]') -> str:
    return f'{TORCH}[kernel.k]\nlanguage = "{language}"\ndepends = {depends}\nsrc = ["k/k.cpp"]\n{extra}\n'


NOARCH = '[torch-noarch]\n'
TVM = '[tvm-ffi]\nsrc = ["tvm-ext/binding.cpp"]\n'

CASES: dict[str, str] = {
    # [general]
    "e6-minimal": e6(),
    "e5-minimal": e5(),
    "e4-minimal": e4(),
    "e6-no-version": e6().replace("version = 1\n", ""),
    "e6-no-license": e6().replace('license = "apache-2.0"\n', ""),
    "e5-no-version": e5().replace("version = 1\n", ""),
    "e5-no-license": e5().replace('license = "apache-2.0"\n', ""),
    "e4-no-version": e4().replace("version = 1\n", ""),
    "e4-no-license": e4().replace('license = "apache-2.0"\n', ""),
    "e6-no-name": e6().replace('name = "my-kernel"\n', ""),
    "name-upper": e6().replace('"my-kernel"', '"My_Kernel"'),
    "name-one-letter": e6().replace('"my-kernel"', '"k"'),
    "name-trailing-dash": e6().replace('"my-kernel"', '"my-kernel-"'),
    "version-string": e6().replace("version = 1", 'version = "1"'),
    "version-negative": e6().replace("version = 1", "version = -1"),
    "edition-7": e6().replace("edition = 6", "edition = 7"),
    "edition-4": e6().replace("edition = 6", "edition = 4"),
    "edition-string": e6().replace("edition = 6", 'edition = "6"'),
    "license-int": e6().replace('license = "apache-2.0"', "license = 2"),
    "backends-unknown": e6(backends='["opencl"]'),
    "backends-missing": e6().replace('backends = ["cpu"]\n', ""),
    "upstream-url": e6('upstream = "https://github.com/org/repo"'),
    "upstream-scp": e6('upstream = "git@github.com:org/repo.git"'),
    "upstream-bad": e6('upstream = "not a url"'),
    "upstream-ftp": e6('upstream = "ftp://example.org/repo"'),
    "source-url": e6('source = "https://github.com/org/kernel"'),
    "source-bad": e6('source = "nope"'),
    "build-layout-zip": e6('build-layout = "zip"'),
    "build-layout-files": e6('build-layout = "files"'),
    "build-layout-bad": e6('build-layout = "tar"'),
    "build-layout-e5": e5('build-layout = "zip"'),
    "general-unknown-key": e6("colour = 1"),
    "python-depends": e6('python-depends = ["einops"]'),
    "python-depends-tvm-ffi": e6('python-depends = ["tvm-ffi"]'),
    "python-depends-not-list": e6('python-depends = "einops"'),
    "kernel-depends-version": e6('kernel-depends = [{repo-id = "kernels-community/relu", version = 1}]'),
    "kernel-depends-revision": e6('kernel-depends = [{repo-id = "kernels-community/relu", revision = "abc123"}]'),
    "kernel-depends-both": e6('kernel-depends = [{repo-id = "org/k", version = 1, revision = "abc"}]'),
    "kernel-depends-neither": e6('kernel-depends = [{repo-id = "org/k"}]'),
    "kernel-depends-extra-key": e6('kernel-depends = [{repo-id = "org/k", version = 1, branch = "x"}]'),
    "kernel-depends-no-repo": e6("kernel-depends = [{version = 1}]"),
    "kernel-depends-e4": e4('kernel-depends = [{repo-id = "org/k", version = 1}]'),
    "cuda-general": e6('[general.cuda]\nminver = "12.6"\nmaxver = "13.2"\npython-depends = ["nvidia-cutlass-dsl"]\n'
                       'kernel-depends = [{repo-id = "org/k", version = 2}]', backends='["cpu", "cuda"]'),
    "cuda-general-minver-one-part": e6('[general.cuda]\nminver = "12"'),
    "cuda-general-minver-three-parts": e6('[general.cuda]\nminver = "12.8.1"'),
    "cuda-general-unknown-key": e6('[general.cuda]\narchs = ["8.0"]'),
    "xpu-general": e6('[general.xpu]\npython-depends = ["onednn"]\nkernel-depends = [{repo-id = "org/k", version = 1}]'),
    "xpu-general-unknown-key": e6("[general.xpu]\nminver = \"2025.1\""),
    "neuron-general": e6('[general.neuron]\npython-depends = ["nki"]\nkernel-depends = [{repo-id = "org/k", version = 1}]',
                         body=NOARCH, backends='["neuron"]'),
    "tpu-general": e6('[general.tpu]\npython-depends = ["einops"]', body=NOARCH, backends='["tpu"]'),
    "tpu-general-kernel-depends": e6('[general.tpu]\nkernel-depends = [{repo-id = "org/k", version = 1}]',
                                     body=NOARCH, backends='["tpu"]'),
    "cann-general": e6("[general.cann]\n", body=NOARCH, backends='["cann"]'),
    "hub": e6('[general.hub]\nrepo-id = "org/my-kernel"\nbranch = "main"'),
    "hub-repo-id-no-org": e6('[general.hub]\nrepo-id = "my-kernel"'),
    "name-digit-first": e6().replace('"my-kernel"', '"2relu"'),
    "name-double-dash": e6().replace('"my-kernel"', '"my--kernel"'),
    "backends-duplicate": e6(backends='["cpu", "cpu"]'),
    "pyext-empty": e6(body='[torch]\nsrc = ["torch-ext/torch_binding.cpp"]\npyext = []\n' + CPU6),
    "version-zero": e6().replace("version = 1", "version = 0"),
    "kernel-table-not-table": e6(body=TORCH + "kernel = 1\n"),
    "hub-unknown-key": e6('[general.hub]\nrevision = "main"'),
    # [torch]
    "torch-all-keys": e6(body='[torch]\nsrc = ["torch-ext/torch_binding.cpp"]\ninclude = ["inc"]\npyext = ["py", "json"]\n'
                         'minver = "2.12"\nmaxver = "2.14"\ncxx-flags = ["-DX"]\n' + CPU6),
    "torch-minver-one-part": e6(body='[torch]\nsrc = ["torch-ext/torch_binding.cpp"]\nminver = "2"\n' + CPU6),
    "torch-maxver-three-parts": e6(body='[torch]\nsrc = ["torch-ext/torch_binding.cpp"]\nmaxver = "2.14.1"\n' + CPU6),
    "torch-no-src": e6(body="[torch]\n" + CPU6),
    "torch-unknown-key": e6(body=TORCH + "universal = false\n" + CPU6),
    "stable-abi": e6(body=TORCH + 'stable-abi = "2.10"\n' + CPU6),
    "stable-abi-table": e6(body=TORCH + '[torch.stable-abi]\ncuda = "2.10"\n' + CPU6),
    "stable-abi-table-unknown-backend": e6(body=TORCH + '[torch.stable-abi]\nopencl = "2.10"\n' + CPU6),
    "stable-abi-one-part": e6(body=TORCH + 'stable-abi = "2"\n' + CPU6),
    "stable-abi-table-e4": e4(body=TORCH + '[torch.stable-abi]\ncpu = "2.10"\n' + CPU5),
    "no-framework": e6(body=CPU6),
    "two-frameworks": e6(body=TORCH + NOARCH + CPU6),
    "unknown-section": e6() + "\n[cmake]\nx = 1\n",
    # [torch-noarch]
    "noarch": e6(body=NOARCH, backends='["cpu", "cuda", "rocm", "xpu", "metal"]'),
    "noarch-pyext": e6(body=NOARCH + 'pyext = ["py", "json"]\n'),
    "noarch-cuda-capabilities": e6(body=NOARCH + 'cuda_capabilities = ["8.0", "9.0"]\n', backends='["cuda"]'),
    "noarch-rocm-archs": e6(body=NOARCH + 'rocm_archs = ["gfx942"]\n', backends='["rocm"]'),
    "noarch-cuda-capabilities-kebab": e6(body=NOARCH + 'cuda-capabilities = ["8.0"]\n', backends='["cuda"]'),
    "noarch-unknown-key": e6(body=NOARCH + "src = []\n"),
    "noarch-e5-archs": e5(body=NOARCH + 'cuda_capabilities = ["9.0"]\n', backends='["cuda"]'),
    "noarch-e4-archs": e4(body=NOARCH + 'rocm_archs = ["gfx90a"]\n', backends='["rocm"]'),
    "noarch-tpu": e6(body=NOARCH, backends='["tpu"]'),
    "noarch-neuron": e6(body=NOARCH, backends='["neuron"]'),
    "noarch-cann": e6(body=NOARCH, backends='["cann"]'),
    "noarch-tpu-e5": e5(body=NOARCH, backends='["tpu"]'),
    # [tvm-ffi], [mlx-noarch]
    "tvm-ffi": e6(body=TVM + 'include = ["inc"]\npyext = ["py"]\ncxx-flags = ["-DX"]\n' + CPU6),
    "tvm-ffi-e5": e5(body=TVM + CPU5),
    "tvm-ffi-unknown-key": e6(body=TVM + "stable-abi = \"2.10\"\n" + CPU6),
    "mlx-noarch": e6(body="[mlx-noarch]\n", backends='["metal"]'),
    "mlx-noarch-cpu": e6(body="[mlx-noarch]\n", backends='["cpu"]'),
    # [kernel.<name>]
    "unit-cpp-cuda": e6(body=unit6("cpp-cuda", 'cuda-capabilities = ["8.0", "9.0a"]\ncuda-flags = ["-lineinfo"]\n'
                                   'cuda-minver = "12.8"\ncxx-flags = ["-O2"]\ninclude = ["inc"]'), backends='["cuda"]'),
    "unit-cpp-rocm": e6(body=unit6("cpp-rocm", 'rocm-archs = ["gfx942"]\nhip-flags = ["-O3"]'), backends='["rocm"]'),
    "unit-cpp-xpu": e6(body=unit6("cpp-xpu", 'sycl-flags = ["-O2"]'), backends='["xpu"]'),
    "unit-cpp-metal": e6(body=unit6("cpp-metal", "", '["torch", "metal-cpp"]'), backends='["metal"]'),
    "unit-language-unknown": e6(body=unit6("cpp-opencl")),
    "unit-rust-cpu-torch": e6(body=TORCH + '[kernel.k]\nlanguage = "rust-cpu"\ncargo-manifest = "Cargo.toml"\nsrc = ["k/lib.rs"]\n'),
    "unit-rust-cpu-tvm-ffi": e6(body=TVM + '[kernel.k]\nlanguage = "rust-cpu"\ncargo-manifest = "Cargo.toml"\nsrc = ["k/lib.rs"]\n'),
    "unit-backend-in-e6": e6(body=TORCH + CPU5),
    "unit-language-in-e5": e5(body=TORCH + CPU6),
    "unit-no-depends": e6(body=TORCH + '[kernel.k]\nlanguage = "cpp-cpu"\nsrc = ["k/k.cpp"]\n'),
    "unit-no-src": e6(body=TORCH + '[kernel.k]\nlanguage = "cpp-cpu"\ndepends = []\n'),
    "unit-empty-src": e6(body=TORCH + '[kernel.k]\nlanguage = "cpp-cpu"\ndepends = []\nsrc = []\n'),
    "unit-depends-cutlass": e6(body=unit6("cpp-cuda", "", '["torch", "cutlass_3_9", "cutlass_4_5"]'), backends='["cuda"]'),
    "unit-depends-unknown": e6(body=unit6("cpp-cuda", "", '["torch", "cutlass_9_9"]'), backends='["cuda"]'),
    "unit-depends-sycl-tla": e6(body=unit6("cpp-xpu", "", '["torch", "sycl_tla"]'), backends='["xpu"]'),
    "unit-depends-stable-abi-shim": e6(body=unit6("cpp-cpu", "", '["torch", "torch-stable-abi-shim"]')),
    "unit-cuda-key-on-cpu": e6(body=unit6("cpp-cpu", 'cuda-capabilities = ["8.0"]')),
    "unit-cuda-minver-one-part": e6(body=unit6("cpp-cuda", 'cuda-minver = "12"'), backends='["cuda"]'),
    "unit-unknown-key": e6(body=unit6("cpp-cpu", "optimize = true")),
    "unit-backend-not-listed": e6(body=unit6("cpp-cuda"), backends='["cpu"]'),
    "unit-e5-cuda": e5(body=TORCH + '[kernel.k]\nbackend = "cuda"\ndepends = ["torch"]\nsrc = ["k/k.cu"]\n'
                       'cuda-capabilities = ["8.0"]\n', backends='["cuda"]'),
    "unit-rust-cutile-old": e6(body=TVM + '[kernel.k]\nlanguage = "rust-cutile"\ncargo-manifest = "Cargo.toml"\n'
                              'src = ["k/lib.rs"]\ntileiras-minver = "13.0"\n', backends='["cuda"]'),
    "unit-rust-cutile": e6(body=TVM + '[kernel.k]\nlanguage = "rust-cutile"\ncargo-manifest = "Cargo.toml"\n'
                          'src = ["k/lib.rs"]\ntileiras-minver = "13.2"\n', backends='["cuda"]'),
    "noarch-empty-kernel-table": e5(body=NOARCH + "[kernel]\n", backends='["tpu"]'),
    # kbuild is stricter (see STRICTER)
    "python-depends-unknown": e6('python-depends = ["numpy"]'),
    "backends-empty": e6(backends="[]"),
    "noarch-with-units": e6(body=NOARCH + '[kernel.k]\nlanguage = "cpp-cpu"\ndepends = []\nsrc = ["k/k.cpp"]\n'),
    "torch-tpu": e6(body=TORCH, backends='["tpu"]'),
    "unit-cuda-capabilities-bad": e6(body=unit6("cpp-cuda", 'cuda-capabilities = ["sm_90"]'), backends='["cuda"]'),
    "unit-e5-backend-unknown": e5(body=TORCH + '[kernel.k]\nbackend = "tpu"\ndepends = []\nsrc = ["k/k.cpp"]\n',
                                  backends='["tpu"]'),
}


def _lay_out(root: Path, text: str) -> None:
    """Create every file and folder `text` names, so that only the schema decides the verdict."""
    (root / "build.toml").write_text(text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return
    general = data.get("general", {})
    name = general.get("name") if isinstance(general, dict) else None
    if isinstance(name, str) and name:
        package = root / ("tvm-ffi-ext" if "tvm-ffi" in data else "torch-ext") / name.replace("-", "_")
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text("")
    tables = [data.get(f) for f in ("torch", "tvm-ffi")] + list((data.get("kernel") or {}).values())
    for table in tables:
        if not isinstance(table, dict):
            continue
        for rel in table.get("src", []) if isinstance(table.get("src"), list) else []:
            if isinstance(rel, str):
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_text("// source\n")
        for rel in table.get("include", []) if isinstance(table.get("include"), list) else []:
            if isinstance(rel, str):
                (root / rel).mkdir(parents=True, exist_ok=True)
        if isinstance(table.get("cargo-manifest"), str):
            (root / table["cargo-manifest"]).write_text("[package]\n")


def reference_verdict(root: Path) -> str | None:
    """None when kernels accepts the folder's build.toml, else its message."""
    with redirect_stderr(io.StringIO()):  # its in-memory upgrade warning
        try:
            rust.Build.open(str(root))
        except ValueError as e:
            return str(e)
    return None


def kbuild_verdict(root: Path) -> str | None:
    try:
        load_manifest(root)
    except ManifestError as e:
        return e.message
    return None


# Accepted by kernels' parser, refused by kbuild before anything builds: kernel-builder itself
# refuses each of these later, when it builds (or builds nothing). case -> the field kbuild names.
STRICTER = {
    "python-depends-unknown": "python-depends",  # kernel-builder fails resolving an unknown name
    "backends-empty": "backends",  # nothing to build
    "noarch-with-units": "kernel.k",  # a noarch build would drop the compiled units silently
    "torch-tpu": "backends",  # TPU has no compiler: its kernels are [torch-noarch] Python
    "unit-cuda-capabilities-bad": "cuda-capabilities",  # nvcc refuses it (kernel-builder's relu-invalid-capability)
}


@pytest.mark.parametrize("case", sorted(set(CASES) - set(STRICTER)))
def test_verdict_matches_reference(case: str, tmp_path: Path) -> None:
    _lay_out(tmp_path, CASES[case])
    expected, got = reference_verdict(tmp_path), kbuild_verdict(tmp_path)
    if expected is None:
        assert got is None, f"kernels accepts {case}, kbuild refuses: {got}"
    else:
        assert got is not None, f"kernels refuses {case} ({expected.splitlines()[-1]}), kbuild accepts it"
        assert "\n" not in got


@pytest.mark.parametrize("case", sorted(STRICTER))
def test_stricter_than_reference(case: str, tmp_path: Path) -> None:
    """kbuild refuses these up front, in one line naming the field; kernels' parser lets them through."""
    _lay_out(tmp_path, CASES[case])
    assert reference_verdict(tmp_path) is None, f"kernels now refuses {case}: move it out of STRICTER"
    got = kbuild_verdict(tmp_path)
    assert got is not None and "\n" not in got and STRICTER[case] in got, got


def test_corpus_has_both_verdicts(tmp_path: Path) -> None:
    """The corpus is no use if the reference accepts (or refuses) everything."""
    verdicts = set()
    for i, case in enumerate(("e6-minimal", "e6-no-version")):
        (tmp_path / str(i)).mkdir()
        _lay_out(tmp_path / str(i), CASES[case])
        verdicts.add(reference_verdict(tmp_path / str(i)) is None)
    assert verdicts == {True, False}


def test_kernel_depends_per_backend_as_kernels_reads_them():
    """[general] kernel-depends plus [general.<backend>]'s, for every backend, as kernels'
    Build.all_kernel_depends (what its resolver and `kernels lock` follow) lists them."""
    fixture = Path(__file__).parents[1] / "fixtures" / "noarch-needs"
    with redirect_stderr(io.StringIO()):
        reference = rust.Build.open(str(fixture))
    ours = load_manifest(fixture).general
    for backend in ("cpu", "cuda", "rocm", "xpu", "metal", "tpu"):
        theirs = reference.all_kernel_depends(rust.Backend.from_str(backend))
        pins = [(d.repo_id, d.version.version if hasattr(d.version, "version") else d.version.revision) for d in theirs]
        assert [(d.repo_id, d.version if d.revision is None else d.revision) for d in ours.all_kernel_depends(backend)] == pins
    assert len(ours.all_kernel_depends("cuda")) == 2
