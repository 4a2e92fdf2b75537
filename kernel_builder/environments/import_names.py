"""Which PyPI distribution provides an imported module, for the environments kbuild installs
into (`kbuild test`'s test environment, the import check's overlay).

An `import x` names a module, not a distribution, and an index serves whatever is *called* x:
often someone else's project (`import attr` is the `attrs` distribution; `attr` on PyPI is
unrelated) or a squatter's. So a module is resolved by what provides it, never by its spelling:
1. the interpreter the packages would be added to already has it
   (`importlib.metadata.packages_distributions()` run there): nothing to install;
2. PROVIDERS, a maintained import name -> distribution table;
3. anything else is not installed, and said why: NOT_ON_PYPI names modules known to be built
   from source or ambiguous on the index (apex, flash_attn), and an unknown name is not guessed.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from typing import Mapping

# import name (a top-level module, or a dotted one inside a namespace package) -> distribution.
PROVIDERS = {
    # spelled differently from the module
    "attr": "attrs", "attrs": "attrs", "dateutil": "python-dateutil", "jwt": "PyJWT", "yaml": "PyYAML",
    "PIL": "Pillow", "sklearn": "scikit-learn", "skimage": "scikit-image", "cv2": "opencv-python",
    "hydra": "hydra-core", "google.protobuf": "protobuf", "absl": "absl-py", "bs4": "beautifulsoup4",
    "dotenv": "python-dotenv", "git": "GitPython", "zmq": "pyzmq", "serial": "pyserial",
    "websocket": "websocket-client", "Crypto": "pycryptodome", "pynvml": "nvidia-ml-py",
    "tvm_ffi": "apache-tvm-ffi", "cutlass": "nvidia-cutlass-dsl", "liger_kernel": "liger-kernel",
    "opt_einsum": "opt-einsum", "xdist": "pytest-xdist", "pytest_mock": "pytest-mock",
    "pytest_benchmark": "pytest-benchmark", "pytest_timeout": "pytest-timeout",
    "huggingface_hub": "huggingface-hub", "typing_extensions": "typing-extensions",
    "ml_dtypes": "ml-dtypes",
    # spelled like the module
    **{name: name for name in (
        "accelerate", "bitsandbytes", "click", "datasets", "diffusers", "einops", "einx", "expecttest",
        "filelock", "flaky", "fsspec", "helion", "hypothesis", "jinja2", "kernels", "lxml", "matplotlib",
        "mpmath", "networkx", "numba", "numpy", "nvtx", "omegaconf", "onnx", "onnxruntime", "packaging",
        "pandas", "parameterized", "peft", "psutil", "pydantic", "pytest", "regex", "requests", "rich",
        "safetensors", "scipy", "sentencepiece", "sympy", "tabulate", "timm", "tokenizers", "tqdm",
        "transformers", "triton", "typer",
    )},
}
# Modules a distribution of the same name does not (reliably) provide: never installed by name.
NOT_ON_PYPI = {
    "apex": "NVIDIA apex is built from source; the `apex` on PyPI is an unrelated project",
    "flash_attn": "flash-attn is built from source against the installed torch",
    "flash_attn_interface": "FlashAttention 3 is built from source",
    "flash_attn_2_cuda": "flash-attn's extension is built from source",
    "mamba_ssm": "mamba-ssm is built from source against the installed torch",
    "causal_conv1d": "causal-conv1d is built from source against the installed torch",
    "deep_gemm": "DeepGEMM is built from source",
    "deep_ep": "DeepEP is built from source",
    "triton_kernels": "triton_kernels ships in triton's repository; `triton-kernels` on PyPI is unrelated",
    "cupy": "CuPy's distribution depends on the CUDA version (cupy-cuda11x, cupy-cuda12x, ...)",
    "torchvision": "it must be the release made for the build environment's torch",
    "torchaudio": "it must be the release made for the build environment's torch",
    "vllm": "vllm pins its own torch",
    "intel_extension_for_pytorch": "it pins its own torch",
    "torch_npu": "it must be the release made for the build environment's torch",
}


@dataclass(frozen=True)
class Provider:
    """How an imported module is provided: `distribution` to install, else already `present` or
    left out (neither), and why."""

    module: str
    distribution: str | None
    reason: str
    present: bool = False


_PROBE = "import json\nfrom importlib import metadata\nprint(json.dumps(metadata.packages_distributions()))"


def installed_modules(python: str) -> dict[str, list[str]]:
    """Top-level module -> the distributions providing it, in the interpreter `python`."""
    try:
        out = subprocess.run([python, "-I", "-c", _PROBE], capture_output=True, text=True, check=True).stdout
        return json.loads(out)
    except (OSError, subprocess.CalledProcessError, ValueError):
        return {}  # nothing known installed: every module is resolved by the table alone


def provider(module: str, installed: Mapping[str, list[str]]) -> Provider:
    """What provides `module` (dotted or top-level) on top of an interpreter having `installed`."""
    parts = module.split(".")
    top = parts[0]
    # A dotted entry first: `google.protobuf` is protobuf even where another `google.*` is installed.
    for end in range(len(parts), 1, -1):
        name = ".".join(parts[:end])
        if name in PROVIDERS:
            return Provider(module, PROVIDERS[name], f"{name} is provided by {PROVIDERS[name]}")
    if installed.get(top):
        return Provider(module, None, f"the environment has it ({', '.join(sorted(set(installed[top])))})", present=True)
    if top in PROVIDERS:
        return Provider(module, PROVIDERS[top], f"{top} is provided by {PROVIDERS[top]}")
    if top in NOT_ON_PYPI:
        return Provider(module, None, f"{top} is not installed from the index: {NOT_ON_PYPI[top]}")
    return Provider(module, None, f"no distribution is known to provide {top}, so none is guessed; "
                                  "install it into the build environment to use it")
