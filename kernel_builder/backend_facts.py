"""What kbuild knows about each torch backend, one frozen record per backend: its display
name, how a variant name spells its version, where torch says it was built for it, the
build image's toolkit argument, its build.toml keys, the extra python-depends the kernels
runtime satisfies for it, and the device word its tests use.

Every stage reads these records instead of spelling backend names itself (a house test,
tests/house/test_backend_literals.py, keeps it so); the compiler side of a backend lives
in `compile/backends/<name>.py`. Imported by the runtime loader: standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class BackendFacts:
    """One backend. `compiled` is False for the noarch-only backends (their kernels are
    Python; kbuild compiles nothing for them)."""

    name: str
    display: str  # how messages name it: CUDA, ROCm
    compiled: bool = True
    # The legacy compute tag is `<compute_prefix><major><minor>` (cu130, rocm71, xpu20260);
    # None: the tag is the name itself and the backend has no version (cpu, metal).
    compute_prefix: str | None = None
    tag_digits: str = ""  # the digits a legacy tag may carry, as a regular expression
    example_version: str = ""  # a version of it, for messages (`--matrix cuda>=12.8`)
    odd_tags: tuple[tuple[str, tuple[int, int]], ...] = ()  # digits that do not split as major + last digit
    # A toolkit x.z build loads on x.y for z <= y (else the versions must be equal).
    minor_compatible: bool = False
    min_macos: tuple[int, int] | None = None  # the macOS a build of it needs to load
    # `torch.version.<torch_attribute>` is set in a torch built for it.
    torch_attribute: str | None = None
    toolkit_build_arg: str | None = None  # the build image's Dockerfile argument for its version
    x86_only_images: bool = False  # its toolkit's Enterprise Linux packages exist for x86_64 only
    # build.toml: the [torch-noarch] key of its arch list (written into noarch metadata),
    # whether [general.<name>] exists, and the python-depends it adds to the runtime's common ones.
    noarch_arch_key: str | None = None
    general_table: bool = False
    python_depends: frozenset[str] = frozenset()
    test_device: str = ""  # the torch device its tests run on ("cuda" for ROCm, as torch names it)
    template_folder: str = ""  # the `kbuild init` template folder holding its example kernel

    @property
    def versioned(self) -> bool:
        return self.compute_prefix is not None

    def compute(self, version: tuple[int, int] | None) -> str:
        """The legacy compute tag: cpu, metal, cu130, rocm71, xpu20260."""
        if self.compute_prefix is None or version is None:
            return self.name
        return f"{self.compute_prefix}{version[0]}{version[1]}"

    def version_of_digits(self, digits: str) -> tuple[int, int]:
        """The version a legacy tag's digits spell: all but the last digit are the major."""
        return dict(self.odd_tags).get(digits) or (int(digits[:-1]), int(digits[-1]))

    def label(self, version: tuple[int, int] | None = None) -> str:
        """'CUDA 13.0', 'CPU'."""
        return self.display if version is None else f"{self.display} {version[0]}.{version[1]}"


# Compiled backends first, in listing order; the noarch-only ones after.
ALL = (
    BackendFacts("cpu", "CPU", test_device="cpu", template_folder="cpu"),
    BackendFacts(
        "cuda", "CUDA", compute_prefix="cu", tag_digits=r"\d{2,3}", example_version="12.8", minor_compatible=True,
        torch_attribute="cuda", toolkit_build_arg="CUDA_VERSION", noarch_arch_key="cuda_capabilities", general_table=True,
        python_depends=frozenset({"nvidia-cutlass-dsl"}), test_device="cuda", template_folder="cuda",
    ),
    # Metal kernels are built with `-std=metal4.0`, which needs macOS 26 (as in `kernels` 0.19.1).
    BackendFacts("metal", "Metal", min_macos=(26, 0), test_device="mps", template_folder="metal"),
    BackendFacts(
        # ROCm 7.14's tag is rocm714, not 71.4. torch.version.hip is set in a ROCm torch.
        "rocm", "ROCm", compute_prefix="rocm", tag_digits=r"\d{2,3}", example_version="7.1",
        odd_tags=(("714", (7, 14)),), minor_compatible=True, torch_attribute="hip", toolkit_build_arg="ROCM_VERSION", x86_only_images=True,
        noarch_arch_key="rocm_archs", test_device="cuda", template_folder="cuda",  # hipcc compiles the .cu example
    ),
    BackendFacts(
        "xpu", "XPU", compute_prefix="xpu", tag_digits=r"\d{5}", example_version="2026.0", torch_attribute="xpu",
        toolkit_build_arg="ONEAPI_VERSION", x86_only_images=True, general_table=True,
        python_depends=frozenset({"onednn"}), test_device="xpu", template_folder="xpu",
    ),
    BackendFacts("cann", "CANN", compiled=False),
    BackendFacts("neuron", "Neuron", compiled=False, general_table=True, python_depends=frozenset({"nki"})),
    BackendFacts("tpu", "TPU", compiled=False, general_table=True),
)
FACTS = {f.name: f for f in ALL}

BACKENDS = tuple(sorted(f.name for f in ALL if f.compiled))
# Backends with noarch variants only (`torch-tpu`, ...): their kernels are Python (kernels#714 TPU,
# NKI on Neuron, CANN); kernel-builder compiles nothing for them.
NOARCH_BACKENDS = tuple(sorted(f.name for f in ALL if not f.compiled))
VERSIONED = tuple(f.name for f in ALL if f.versioned)  # backends whose variants carry a version
# The backend whose variants build and load anywhere: the fallback of every choice, and the
# one torch flavour whose extensions compile against any other flavour of the same torch.
FALLBACK = "cpu"
# Words that name a compiled backend's hardware: its name and its torch device.
DEVICE_WORDS = tuple(sorted({w for f in ALL if f.compiled and f.name != FALLBACK for w in (f.name, f.test_device)}))


def label(name: str, version: tuple[int, int] | None = None) -> str:
    """'CUDA 13.0', 'CPU'; an unknown name as it is."""
    record = FACTS.get(name)
    if record is None:
        return name if version is None else f"{name} {version[0]}.{version[1]}"
    return record.label(version)


def parse_compute(tag: str) -> tuple[str, tuple[int, int] | None] | None:
    """A legacy compute tag: `cpu`, `metal`, `cu130` (major = all but the last digit),
    `rocm71` (likewise, but `rocm714` is ROCm 7.14), `xpu20260` (year and one digit)."""
    m = _COMPUTE_RE.match(tag)
    if not m:
        return None
    name = m.lastgroup
    assert name is not None
    record = FACTS[name]
    return (name, None) if not record.versioned else (name, record.version_of_digits(m.group(name)))


def parse_new_compute(tag: str) -> tuple[str, tuple[int, int] | None] | None:
    """A new-style backend: `cpu`, `metal`, `cuda-13.0`, `rocm-7.2`, `xpu-2026.1`."""
    if tag in FACTS and FACTS[tag].compiled and not FACTS[tag].versioned:
        return tag, None
    m = _NEW_COMPUTE_RE.fullmatch(tag)
    return (m.group(1), (int(m.group(2)), int(m.group(3)))) if m else None


def _tag_form(f: BackendFacts) -> str:
    return f"(?P<{f.name}>{f.name})" if not f.versioned else f"{f.compute_prefix}(?P<{f.name}>{f.tag_digits})"


_COMPILED = [f for f in ALL if f.compiled]
_COMPUTE_RE = re.compile("^(?:" + "|".join(_tag_form(f) for f in _COMPILED) + ")$")
_NEW_COMPUTE_RE = re.compile(r"(" + "|".join(VERSIONED) + r")-(\d+)\.(\d+)")


def version_pair(text: str | None) -> tuple[int, int] | None:
    """(major, minor) at the start of a version string, None where there is none."""
    m = re.match(r"^(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def torch_backend(torch) -> tuple[str, tuple[int, int] | None]:
    """The backend an imported torch was built for, and its version, as the `kernels`
    runtime (0.19.1) decides it: `torch.version.cuda`, then `.hip` (ROCm), then MPS, then
    `torch.version.xpu`, else CPU."""
    cuda = getattr(torch.version, "cuda", None)
    if cuda is not None:
        return "cuda", version_pair(cuda)
    hip = getattr(torch.version, "hip", None)
    if hip is not None:
        # The ROCm release can differ from HIP's version; torch.version.rocm exists since 2.10.
        rocm = getattr(torch.version, "rocm", None) or hip
        return "rocm", version_pair(rocm.split("-")[0])
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "metal", None
    xpu = getattr(torch.version, "xpu", None)
    if xpu is not None:
        # torch.version.xpu is e.g. "20250101"; `kernels` takes year = [0:4], minor = [5:6].
        return "xpu", (int(xpu[0:4]), int(xpu[5:6]))
    return FALLBACK, None
