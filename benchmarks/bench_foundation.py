"""Foundation figures, measured in one run side by side:

1. a cold CPU build of examples/swiglu (fresh copy, empty kbuild cache);
2. a no-op rebuild (`kbuild build` with nothing changed), median of 5;
3. `import kernel_builder.runtime` + `load_local` against `import kernels` +
   `get_local_kernel` on the same build, each in a fresh interpreter, median of 5.

Usage: python benchmarks/bench_foundation.py
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(cmd: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="kbuild-bench-"))
    env = dict(os.environ, KBUILD_CACHE_DIR=str(work / "cache"))
    root = work / "swiglu"
    shutil.copytree(REPO / "examples" / "swiglu", root, ignore=shutil.ignore_patterns("build", "__pycache__"))
    import torch

    cpu_variant = "torch{}{}-cxx11-cpu-x86_64-linux".format(*torch.__version__.split(".")[:2])
    kbuild = [sys.executable, "-m", "kernel_builder.cli", "build", str(root), "--variant", cpu_variant]
    cold = timed(kbuild, env)
    noop = statistics.median(timed(kbuild, env) for _ in range(5))
    print(f"cold CPU build of examples/swiglu: {cold:8.2f} s")
    print(f"no-op rebuild (median of 5):       {noop:8.3f} s   ({cold / noop:,.0f}x faster than cold)")

    ours = f"import time; t=time.perf_counter(); import kernel_builder.runtime as r; r.load_local({str(root)!r}); print(time.perf_counter()-t)"
    theirs = f"import time, pathlib; t=time.perf_counter(); import kernels; kernels.get_local_kernel(pathlib.Path({str(root)!r}), backend='cpu'); print(time.perf_counter()-t)"

    def in_process(code: str) -> float:
        out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
        return float(out.stdout.strip().splitlines()[-1])

    a, b = [], []
    for _ in range(5):  # interleaved, so machine noise hits both alike
        a.append(in_process(ours))
        b.append(in_process(theirs))
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"kernel_builder.runtime import + load_local:   {ma * 1000:8.1f} ms (median of 5, includes import torch)")
    print(f"kernels import + get_local_kernel:            {mb * 1000:8.1f} ms (median of 5, includes import torch)")
    print(f"ratio kernels / kbuild runtime:               {mb / ma:8.2f}x")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
