"""The thin runtime loader: system detection, variant selection, digests, load_local.

Fake variant folders are pure-Python packages with correct metadata, so no compiler is
needed; the one that is named for this machine also loads in the real `kernels` runtime.
"""

from __future__ import annotations

import itertools
import json
import pathlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import optional_module
from kernel_builder.errors import KbuildError
from kernel_builder.runtime import (
    DigestMismatchError,
    KernelLoadError,
    System,
    detect_system,
    find_variant,
    hash_variant,
    load_local,
    select_variant,
    verify_digest,
)
from kernel_builder.variants import Variant

# The runtime loads variants into this interpreter, with its torch.
optional_module("torch")

REPO = Path(__file__).resolve().parents[2]
_ids = itertools.count()


# -- helpers -------------------------------------------------------------------------
def unique_id(name: str = "fake") -> str:
    """A module id no other test uses (sys.modules is shared by the whole session)."""
    return f"_{name}_cpu_t{next(_ids):03d}{id(object()) % 10**6:06d}"


def make_variant(folder: Path, *, module_id: str | None = None, value: int = 42, name: str = "fake-kernel") -> str:
    """A pure-Python variant package with a relative import and correct metadata."""
    module_id = module_id or unique_id()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").write_text("from ._impl import value, double\n\n__all__ = ['value', 'double']\n")
    (folder / "_impl.py").write_text(f"value = {value}\n\ndef double(x):\n    return 2 * x\n")
    metadata = {
        "id": module_id,
        "name": name,
        "version": 1,
        "license": "Apache-2.0",
        "python-depends": [],
        "backend": {"type": "cpu"},
        "digest": {"algorithm": "sha256", "files": hash_variant(folder)},
        "provenance": {
            "kernel-builder": {"version": "0.1.0", "commit": "0" * 40, "dirty": False},
            "kernel": {"commit": "1" * 40, "dirty": False},
        },
    }
    (folder / "metadata.json").write_text(json.dumps(metadata, indent=2))
    return module_id


def make_repo(root: Path, variant_name: str | None = None, **kw) -> tuple[Path, str]:
    """A kernel repo root with build/<variant>/ for this machine; returns (variant dir, id)."""
    variant_name = variant_name or detect_system().variant_name
    folder = root / "build" / variant_name
    return folder, make_variant(folder, **kw)


LINUX = System(arch="x86_64", os="linux", torch=(2, 13), cxx11=True, backend="cpu")
CUDA_12_8 = System(arch="x86_64", os="linux", torch=(2, 13), cxx11=True, backend="cuda", backend_version=(12, 8))


def decisions(names, system):
    best, trace = select_variant(names, system)
    return best, {d.name: d for d in trace}


def best_name(names, system) -> str | None:
    best, _ = select_variant(names, system)
    return None if best is None else best.name


# -- system --------------------------------------------------------------------------
def test_detect_system_describes_this_machine():
    import platform

    import torch

    s = detect_system()
    assert s.os == platform.system().lower()
    assert s.torch == tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    if s.os == "linux":
        assert s.cxx11 == torch.compiled_with_cxx11_abi()
    else:
        assert s.cxx11 is None
    if torch.version.cuda is None and torch.version.hip is None and not torch.backends.mps.is_available():
        assert s.backend in ("cpu", "xpu")
    assert s.variant_name.startswith(f"torch{s.torch[0]}{s.torch[1]}")
    assert s.platform in s.describe() and s.backend in s.describe()


def test_backend_override():
    assert detect_system("cpu").backend == "cpu"
    assert detect_system("cpu").backend_version is None
    native = detect_system().backend
    assert detect_system(native).backend == native
    with pytest.raises(KbuildError) as e:
        detect_system("tpu-of-dreams")
    assert "tpu-of-dreams" in e.value.message and "cpu" in e.value.message
    if native != "cuda":
        with pytest.raises(KbuildError):
            detect_system("cuda")


def test_cpu_arch_names_are_normalized(monkeypatch):
    import platform

    from kernel_builder.runtime import system

    for machine, arch in (("arm64", "aarch64"), ("AMD64", "x86_64"), ("x86_64", "x86_64"), ("aarch64", "aarch64")):
        monkeypatch.setattr(platform, "machine", lambda m=machine: m)
        assert system.detect_arch() == arch


def test_system_compute_tags():
    assert CUDA_12_8.compute == "cu128"
    assert CUDA_12_8.variant_name == "torch213-cxx11-cu128-x86_64-linux"
    assert System("x86_64", "linux", (2, 13), True, "xpu", (2026, 0)).compute == "xpu20260"
    assert System("aarch64", "darwin", (2, 13), None, "metal").variant_name == "torch213-metal-aarch64-darwin"


# -- selection -----------------------------------------------------------------------
def test_exact_torch_variant_for_this_machine():
    best, trace = decisions(["torch213-cxx11-cpu-x86_64-linux", "torch212-cxx11-cpu-x86_64-linux"], LINUX)
    assert best == Variant.parse("torch213-cxx11-cpu-x86_64-linux")
    rejected = trace["torch212-cxx11-cpu-x86_64-linux"]
    assert not rejected.accepted and "2.12" in rejected.reason and "2.13" in rejected.reason


def test_arch_and_os_must_match():
    names = ["torch213-cxx11-cpu-aarch64-linux", "torch213-cpu-x86_64-windows"]
    best, trace = decisions(names, LINUX)
    assert best is None
    assert "aarch64" in trace["torch213-cxx11-cpu-aarch64-linux"].reason
    assert "windows" in trace["torch213-cpu-x86_64-windows"].reason


def test_cxx11_tag_must_match_torch_abi():
    old_abi = System(arch="x86_64", os="linux", torch=(2, 13), cxx11=False, backend="cpu")
    best, trace = decisions(["torch213-cxx11-cpu-x86_64-linux", "torch213-cxx98-cpu-x86_64-linux"], old_abi)
    assert best.name == "torch213-cxx98-cpu-x86_64-linux"
    assert "ABI" in trace["torch213-cxx11-cpu-x86_64-linux"].reason
    assert best_name(["torch213-cxx98-cpu-x86_64-linux"], LINUX) is None
    # Untagged variants fit either ABI.
    assert best_name(["torch213-cpu-x86_64-linux"], old_abi) == "torch213-cpu-x86_64-linux"


def test_cuda_major_equal_and_minor_at_most_the_system():
    names = [
        "torch213-cxx11-cu126-x86_64-linux",
        "torch213-cxx11-cu128-x86_64-linux",
        "torch213-cxx11-cu129-x86_64-linux",
        "torch213-cxx11-cu130-x86_64-linux",
        "torch213-cxx11-cu118-x86_64-linux",
    ]
    best, trace = decisions(names, CUDA_12_8)
    assert best.name == "torch213-cxx11-cu128-x86_64-linux"  # highest minor <= 12.8
    assert trace["torch213-cxx11-cu126-x86_64-linux"].accepted
    for name in ("torch213-cxx11-cu129-x86_64-linux", "torch213-cxx11-cu130-x86_64-linux", "torch213-cxx11-cu118-x86_64-linux"):
        assert not trace[name].accepted and "CUDA" in trace[name].reason
    # A CPU-only machine takes no CUDA build, and a CUDA machine no CPU arch build.
    assert best_name(names, LINUX) is None
    assert best_name(["torch213-cxx11-cpu-x86_64-linux"], CUDA_12_8) is None


def test_rocm_is_minor_compatible_like_cuda_and_xpu_matches_exactly():
    # kernels 0.19.1: a ROCm x.z build loads on ROCm x.y for z <= y, as CUDA does.
    rocm = System("x86_64", "linux", (2, 13), True, "rocm", (7, 1))
    names = ["torch213-cxx11-rocm70-x86_64-linux", "torch213-cxx11-rocm71-x86_64-linux", "torch213-cxx11-rocm72-x86_64-linux"]
    best, trace = decisions(names, rocm)
    assert best.name == "torch213-cxx11-rocm71-x86_64-linux"
    assert trace["torch213-cxx11-rocm70-x86_64-linux"].accepted
    assert not trace["torch213-cxx11-rocm72-x86_64-linux"].accepted
    assert "ROCm 7.2" in trace["torch213-cxx11-rocm72-x86_64-linux"].reason
    xpu = System("x86_64", "linux", (2, 13), True, "xpu", (2026, 0))
    assert best_name(["torch213-cxx11-xpu20251-x86_64-linux", "torch213-cxx11-xpu20260-x86_64-linux"], xpu) == (
        "torch213-cxx11-xpu20260-x86_64-linux"
    )


def test_metal_needs_darwin():
    mac = System("aarch64", "darwin", (2, 13), None, "metal", macos=(26, 1))
    assert best_name(["torch213-metal-aarch64-darwin"], mac) == "torch213-metal-aarch64-darwin"
    old_mac = System("aarch64", "darwin", (2, 13), None, "metal", macos=(15, 4))
    _, trace = decisions(["torch213-metal-aarch64-darwin"], old_mac)
    assert "macOS 26" in trace["torch213-metal-aarch64-darwin"].reason
    fake_linux_metal = System("aarch64", "linux", (2, 13), True, "metal")
    _, trace = decisions(["torch213-cxx11-metal-aarch64-linux"], fake_linux_metal)
    assert "macOS" in trace["torch213-cxx11-metal-aarch64-linux"].reason


def test_stable_abi_loads_on_its_version_and_newer():
    names = ["torch-stable-abi210-cu128-x86_64-linux", "torch-stable-abi212-cu126-x86_64-linux", "torch-stable-abi214-cu128-x86_64-linux"]
    best, trace = decisions(names, CUDA_12_8)
    assert best.name == "torch-stable-abi212-cu126-x86_64-linux"  # newest ABI first, even over a higher CUDA minor
    assert trace["torch-stable-abi210-cu128-x86_64-linux"].accepted
    too_new = trace["torch-stable-abi214-cu128-x86_64-linux"]
    assert not too_new.accepted and "2.14" in too_new.reason and "newer" in too_new.reason
    # Same ABI: the highest CUDA minor wins.
    assert best_name(["torch-stable-abi210-cu126-x86_64-linux", "torch-stable-abi210-cu128-x86_64-linux"], CUDA_12_8) == (
        "torch-stable-abi210-cu128-x86_64-linux"
    )


def test_preference_order():
    names = [
        "torch-universal",
        "torch-cuda",
        "torch213-cxx11-cu126-x86_64-linux",
        "torch213-cu126-x86_64-linux",
        "torch213-cxx11-cu128-x86_64-linux",
        "torch-stable-abi211-cu128-x86_64-linux",
        "torch-stable-abi212-cu126-x86_64-linux",
        "torch212-cxx11-cu128-x86_64-linux",  # rejected: last
    ]
    best, trace = select_variant(names, CUDA_12_8)
    assert [d.name for d in trace] == [
        "torch-stable-abi212-cu126-x86_64-linux",
        "torch-stable-abi211-cu128-x86_64-linux",
        "torch213-cu126-x86_64-linux",  # tagless before tagged
        "torch213-cxx11-cu128-x86_64-linux",  # then the highest backend minor
        "torch213-cxx11-cu126-x86_64-linux",
        "torch-cuda",
        "torch-universal",
        "torch212-cxx11-cu128-x86_64-linux",
    ]
    assert [d.accepted for d in trace] == [True] * 7 + [False]
    assert best.name == trace[0].name
    # Without stable-ABI builds the exact-torch ones lead.
    assert best_name(names[:5], CUDA_12_8) == "torch213-cu126-x86_64-linux"


def test_noarch_and_universal_fallbacks():
    assert best_name(["torch-cpu", "torch-universal"], LINUX) == "torch-cpu"
    assert best_name(["torch-cuda", "torch-universal"], LINUX) == "torch-universal"
    _, trace = decisions(["torch-cuda"], LINUX)
    assert not trace["torch-cuda"].accepted and "cuda" in trace["torch-cuda"].reason
    assert best_name(["torch-universal"], CUDA_12_8) == "torch-universal"
    no_torch = System("x86_64", "linux", None, None, "cpu")
    best, trace = decisions(["torch213-cxx11-cpu-x86_64-linux", "torch-cpu"], no_torch)
    assert best.name == "torch-cpu"
    assert "torch is not installed" in trace["torch213-cxx11-cpu-x86_64-linux"].reason


def test_free_threaded_python_takes_no_compiled_variant():
    ft = System("x86_64", "linux", (2, 13), True, "cpu", python=(3, 14), free_threaded=True)
    best, trace = decisions(["torch213-cxx11-cpu-x86_64-linux", "torch-universal"], ft)
    assert best.name == "torch-universal"
    assert "free-threaded" in trace["torch213-cxx11-cpu-x86_64-linux"].reason


def test_stray_folders_are_ignored():
    best, trace = select_variant(["__pycache__", "notes", "torch-nonsense", "torch213-cxx11-cpu-x86_64-linux", ".git"], LINUX)
    assert best.name == "torch213-cxx11-cpu-x86_64-linux"
    assert [d.name for d in trace] == ["torch213-cxx11-cpu-x86_64-linux"]
    assert select_variant([], LINUX) == (None, [])


def test_selection_agrees_with_kernels_on_this_machine():
    """The same candidates, resolved by the installed `kernels` runtime for this machine."""
    try:  # kernels 0.19 moved its modules under kernels._internals
        from kernels._internals.variants import parse_variant, resolve_variant
    except ImportError:
        from kernels.variants import parse_variant, resolve_variant

    s = detect_system()
    t = f"torch{s.torch[0]}{s.torch[1]}"
    names = [
        s.variant_name,
        f"{t}-cpu-{s.platform}",
        f"torch{s.torch[0]}{s.torch[1] - 1}-cxx11-cpu-{s.platform}",
        f"torch-stable-abi{s.torch[0]}{s.torch[1] - 1}-cpu-{s.platform}",
        f"torch-stable-abi{s.torch[0]}{s.torch[1] + 1}-cpu-{s.platform}",
        f"{t}-cxx11-cu128-{s.platform}",
        "torch-cpu",
        "torch-cuda",
        "torch-universal",
    ]
    for k in range(1, len(names) + 1):
        subset = names[-k:]
        ours, _ = select_variant(subset, s)
        theirs, _ = resolve_variant([parse_variant(n) for n in subset], backend=s.backend)
        assert (ours.name if ours else None) == (theirs.variant_str if theirs else None), subset


# -- digests -------------------------------------------------------------------------
def test_hash_variant_equals_kernels_digest(tmp_path):
    from kernels._rust import Digest, DigestAlgorithm

    v = tmp_path / "torch213-cxx11-cpu-x86_64-linux"
    (v / "layers" / "deep").mkdir(parents=True)
    (v / "__pycache__").mkdir()
    (v / "layers" / "__pycache__").mkdir()
    (v / ".hidden_dir").mkdir()
    (v / "__init__.py").write_text("from ._ops import ops\n")
    (v / "_ops.py").write_text("ops = None\n")
    (v / "layers" / "__init__.py").write_text("")
    (v / "layers" / "deep" / "blob.bin").write_bytes(bytes(range(256)) * 17)
    (v / "layers" / "metadata.json").write_text("{}")  # only the top-level one is excluded
    (v / ".hidden").write_text("secret")
    (v / ".hidden_dir" / "x").write_text("x")
    (v / "__pycache__" / "_ops.cpython-311.pyc").write_bytes(b"\x00bytecode")
    (v / "layers" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\x00bytecode")
    (v / "layers" / "stray.pyc").write_bytes(b"\x00")
    (v / "empty").mkdir()
    (v / "metadata.json").write_text("{}")
    (v / "alias.py").symlink_to("_ops.py")  # a linked file is hashed by its target's bytes
    (v / "linked_dir").symlink_to("layers", target_is_directory=True)  # a linked folder is not walked

    ours = hash_variant(v)
    theirs = Digest.hash_variant(DigestAlgorithm.SHA256, v).files
    assert ours == dict(theirs)
    assert ".hidden" in ours and ".hidden_dir/x" in ours and "layers/metadata.json" in ours and "alias.py" in ours
    assert not any(p.startswith("linked_dir") for p in ours)
    assert "metadata.json" not in ours and not any("__pycache__" in p or p.endswith(".pyc") for p in ours)
    assert hash_variant(str(v)) == ours
    assert hash_variant(v, "sha512") == dict(Digest.hash_variant(DigestAlgorithm.SHA512, v).files)


def test_verify_digest_reports_each_violation(tmp_path):
    v = tmp_path / "v"
    make_variant(v)
    metadata = json.loads((v / "metadata.json").read_text())
    assert verify_digest(v, metadata) == []

    (v / "_impl.py").write_text("value = 666\n")
    (v / "extra.py").write_text("")
    (v / "__init__.py").unlink()
    problems = verify_digest(v, metadata)
    assert len(problems) == 3
    assert any("missing" in p and "__init__.py" in p for p in problems)
    assert any("unknown" in p and "extra.py" in p for p in problems)
    assert any("mismatch" in p and "_impl.py" in p for p in problems)

    md5 = dict(metadata, digest={"algorithm": "md5", "files": {}})
    assert "unsupported" in verify_digest(v, md5)[0]
    assert verify_digest(v, {}) and "digest" in verify_digest(v, {})[0]


def kernels_verdict(v: Path) -> list[str]:
    """kernels 0.19.1's own verification of the variant folder `v`: its violations."""
    from kernels._internals.digest import DigestVerificationResult, verify_digest as kernels_verify
    from kernels._rust import Metadata

    result = kernels_verify(v, metadata=Metadata.read_from_file(v / "metadata.json"), location=None)
    if isinstance(result, DigestVerificationResult.DigestVerificationFailure):
        return [str(violation) for violation in result.violations]
    assert isinstance(result, DigestVerificationResult.Success), result
    return []


def test_a_signature_bundle_is_left_out_of_the_digest_as_kernels_does(tmp_path):
    from kernels._rust import Digest, DigestAlgorithm

    folder, _ = make_repo(tmp_path / "kernel")
    # What kernels-community ships beside every build: a Sigstore bundle over metadata.json.
    (folder / "metadata.json.sigstore").write_text('{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}')
    metadata = json.loads((folder / "metadata.json").read_text())
    assert hash_variant(folder) == dict(Digest.hash_variant(DigestAlgorithm.SHA256, folder).files)
    assert "metadata.json.sigstore" not in hash_variant(folder)
    assert verify_digest(folder, metadata) == [] and kernels_verdict(folder) == []
    assert load_local(tmp_path / "kernel").value == 42

    # Only the top-level bundle is left out: any other extra file is refused by both.
    for extra in ("extra.py", "sub/metadata.json.sigstore", "metadata.json.sigstore.bak"):
        (folder / extra).parent.mkdir(exist_ok=True)
        (folder / extra).write_text("x")
        assert verify_digest(folder, metadata) == [f"{extra}: unknown file (in the folder, not listed in the digest)"]
        assert kernels_verdict(folder) == [f"Unknown file: {extra}"]
        (folder / extra).unlink()


def test_names_are_compared_before_any_file_is_hashed(tmp_path, monkeypatch):
    import kernel_builder.runtime.digest as digest

    v = tmp_path / "v"
    make_variant(v)
    metadata = json.loads((v / "metadata.json").read_text())
    with open(v / "huge.bin", "wb") as f:
        f.truncate(40 << 30)  # sparse: 40 GB that take minutes to hash

    def file_digest(path, algorithm):
        assert not path.endswith("huge.bin"), "the unknown file was read"
        return original(path, algorithm)

    original = digest._file_digest
    monkeypatch.setattr(digest, "_file_digest", file_digest)
    assert verify_digest(v, metadata) == ["huge.bin: unknown file (in the folder, not listed in the digest)"]


# -- load_local ----------------------------------------------------------------------
@pytest.mark.parametrize("where", ["root", "build", "variant"])
def test_load_local_from_root_build_or_variant(tmp_path, where):
    folder, module_id = make_repo(tmp_path / "kernel", value=where.__len__())
    path = {"root": tmp_path / "kernel", "build": tmp_path / "kernel" / "build", "variant": folder}[where]
    module = load_local(path)
    assert module.value == len(where)  # `from ._impl import value` worked
    assert module.double(4) == 8
    assert module.__name__ == module_id
    assert sys.modules[module_id] is module
    assert sys.modules[f"{module_id}._impl"].value == len(where)
    assert Path(module.__file__).resolve() == (folder / "__init__.py").resolve()
    assert find_variant(path) == folder


def test_load_local_accepts_str_and_caches(tmp_path):
    folder, _ = make_repo(tmp_path / "k")
    first = load_local(str(tmp_path / "k"))
    assert load_local(tmp_path / "k") is first
    assert load_local(folder) is first  # same variant folder, reached another way


def test_two_ids_load_side_by_side(tmp_path):
    a_dir, a_id = make_repo(tmp_path / "a", value=1)
    b_dir, b_id = make_repo(tmp_path / "b", value=2)
    a, b = load_local(tmp_path / "a"), load_local(tmp_path / "b")
    assert a is not b and (a.value, b.value) == (1, 2)
    assert sys.modules[a_id] is a and sys.modules[b_id] is b


def test_picks_the_best_variant_and_ignores_stray_folders(tmp_path):
    root = tmp_path / "k"
    s = detect_system()
    make_variant(root / "build" / "torch-universal", value=0)
    make_variant(root / "build" / f"torch{s.torch[0]}{s.torch[1] + 1}-cxx11-cpu-{s.platform}", value=-1)
    make_repo(root, value=7)
    (root / "build" / "not-a-variant").mkdir()
    (root / "build" / "README.md").write_text("hi")
    assert load_local(root).value == 7


def test_universal_fallback_loads(tmp_path):
    make_variant(tmp_path / "k" / "build" / "torch-universal", value=5)
    assert load_local(tmp_path / "k").value == 5


def test_tampered_build_raises_and_imports_nothing(tmp_path):
    folder, module_id = make_repo(tmp_path / "k")
    (folder / "_impl.py").write_text("value = 'evil'\n")
    with pytest.raises(DigestMismatchError) as e:
        load_local(tmp_path / "k")
    message = e.value.message
    assert "_impl.py" in message and "modified or corrupted" in message and "rebuild" in message
    assert isinstance(e.value, KernelLoadError) and isinstance(e.value, KbuildError)
    assert e.value.violations and e.value.path == folder.resolve()
    assert module_id not in sys.modules and f"{module_id}._impl" not in sys.modules
    # An added file is a violation too; verify=False loads anyway.
    folder2, id2 = make_repo(tmp_path / "k2")
    (folder2 / "injected.py").write_text("")
    with pytest.raises(DigestMismatchError, match="injected.py"):
        load_local(folder2)
    assert id2 not in sys.modules
    assert load_local(folder2, verify=False).value == 42


def test_missing_metadata_key_names_the_key_and_file(tmp_path):
    folder, module_id = make_repo(tmp_path / "k")
    metadata = json.loads((folder / "metadata.json").read_text())
    del metadata["license"]
    (folder / "metadata.json").write_text(json.dumps(metadata))
    with pytest.raises(KernelLoadError) as e:
        load_local(tmp_path / "k")
    assert "'license'" in e.value.message and "metadata.json" in e.value.message
    assert module_id not in sys.modules


def test_bad_metadata_types_and_json(tmp_path):
    folder, _ = make_repo(tmp_path / "k")
    metadata = json.loads((folder / "metadata.json").read_text())
    (folder / "metadata.json").write_text(json.dumps(dict(metadata, version="one")))
    with pytest.raises(KernelLoadError, match="'version' must be an integer"):
        load_local(folder)
    (folder / "metadata.json").write_text(json.dumps(dict(metadata, id="not-an-identifier")))
    with pytest.raises(KernelLoadError, match="identifier"):
        load_local(folder)
    (folder / "metadata.json").write_text("{ nope")
    with pytest.raises(KernelLoadError, match="not valid JSON"):
        load_local(folder)


def test_no_matching_variant_lists_the_reasons(tmp_path):
    s = detect_system()
    root = tmp_path / "k"
    make_variant(root / "build" / f"torch{s.torch[0]}{s.torch[1] - 1}-cxx11-cpu-{s.platform}")
    make_variant(root / "build" / "torch-cuda")
    other_arch = "aarch64" if s.arch != "aarch64" else "x86_64"
    make_variant(root / "build" / f"torch{s.torch[0]}{s.torch[1]}-cxx11-cpu-{other_arch}-{s.os}")
    with pytest.raises(KernelLoadError) as e:
        load_local(root)
    message = e.value.message
    assert "\n" not in message
    assert s.describe() in message
    assert f"{s.torch[0]}.{s.torch[1] - 1}" in message  # the torch reason
    assert "torch-cuda" in message and other_arch in message
    assert message.count("rejected") == 3


def test_empty_or_missing_paths(tmp_path):
    (tmp_path / "empty" / "build").mkdir(parents=True)
    with pytest.raises(KernelLoadError, match="No build variants found"):
        load_local(tmp_path / "empty")
    with pytest.raises(KernelLoadError, match="does not exist"):
        load_local(tmp_path / "nowhere")


def test_incompatible_variant_folder_given_directly(tmp_path):
    s = detect_system()
    folder = tmp_path / f"torch{s.torch[0]}{s.torch[1] - 1}-cxx11-cpu-{s.platform}"
    module_id = make_variant(folder)
    with pytest.raises(KernelLoadError, match="cannot load on this machine"):
        load_local(folder)
    assert module_id not in sys.modules
    # A variant folder whose name says nothing is loaded as given.
    plain = tmp_path / "my-copy"
    make_variant(plain, value=3)
    assert load_local(plain).value == 3


def test_import_error_unregisters_the_module(tmp_path):
    folder = tmp_path / "k" / "build" / detect_system().variant_name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("from ._impl import value\nraise RuntimeError('boom')\n")
    (folder / "_impl.py").write_text("value = 1\n")
    module_id = unique_id()
    metadata = {
        "id": module_id, "name": "boom", "version": 1, "license": "MIT", "python-depends": [],
        "backend": {"type": "cpu"}, "digest": {"algorithm": "sha256", "files": hash_variant(folder)},
        "provenance": {"kernel-builder": {"version": "0.1.0"}, "kernel": {}},
    }  # fmt: skip
    (folder / "metadata.json").write_text(json.dumps(metadata))
    with pytest.raises(RuntimeError, match="boom") as e:
        load_local(tmp_path / "k")
    assert any("boom" in note and str(folder.resolve()) in note for note in getattr(e.value, "__notes__", []))
    assert module_id not in sys.modules and f"{module_id}._impl" not in sys.modules


def test_duplicate_id_from_another_folder_is_refused(tmp_path):
    module_id = unique_id()
    make_repo(tmp_path / "a", module_id=module_id, value=1)
    make_repo(tmp_path / "b", module_id=module_id, value=2)
    assert load_local(tmp_path / "a").value == 1
    with pytest.raises(KernelLoadError, match="already imported"):
        load_local(tmp_path / "b")
    assert sys.modules[module_id].value == 1


def test_the_same_folder_loads_in_the_kernels_runtime(tmp_path):
    import kernels

    root = tmp_path / "kernel"
    folder, module_id = make_repo(root, value=11)
    theirs = kernels.get_local_kernel(pathlib.Path(root), backend="cpu")
    assert theirs.value == 11 and theirs.__name__ == module_id
    assert Path(theirs.__file__).resolve() == (folder / "__init__.py").resolve()
    # Ours finds the module kernels registered under the same id and reuses it.
    assert load_local(root, backend="cpu") is theirs


def test_import_is_light():
    """Importing the runtime and loading a kernel pulls in none of the CLI's dependencies
    (nor `kernels`), and importing alone does not even import torch."""
    code = textwrap.dedent(
        """
        import json, pathlib, sys, tempfile
        import kernel_builder.runtime as rt
        heavy = ("huggingface_hub", "typer", "jinja2", "rich", "kernels")
        after_import = sorted(m for m in heavy + ("torch",) if m in sys.modules)
        folder = pathlib.Path(tempfile.mkdtemp()) / "build" / rt.detect_system().variant_name
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("from ._impl import value\\n")
        (folder / "_impl.py").write_text("value = 42\\n")
        metadata = {"id": "_light_cpu_0000000", "name": "light", "version": 1, "license": "MIT",
                    "python-depends": [], "backend": {"type": "cpu"},
                    "digest": {"algorithm": "sha256", "files": rt.hash_variant(folder)},
                    "provenance": {"kernel-builder": {"version": "0"}, "kernel": {}}}
        (folder / "metadata.json").write_text(json.dumps(metadata))
        module = rt.load_local(folder.parent.parent)
        after_load = sorted(m for m in heavy if m in sys.modules)
        print(json.dumps({"after_import": after_import, "after_load": after_load, "value": module.value}))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"after_import": [], "after_load": [], "value": 42}
