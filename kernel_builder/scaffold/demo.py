"""`kbuild demo`: the quick start's smoke test. Scaffold the embedded example kernel,
build it for this machine, load it with the runtime and check its op against torch."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kernel_builder.build.pipeline import build_kernel
from kernel_builder.errors import KbuildError
from kernel_builder.scaffold.new_kernel import scaffold

# Runs in the build environment's interpreter (which has torch); prints one line.
_CHECK = r"""
import sys, time, torch
from kernel_builder.runtime import load_local
start = time.perf_counter()
k = load_local(sys.argv[1])
loaded = time.perf_counter() - start
x, y = torch.randn(4096), torch.randn(4096)
got = k.scale_add(x, y, 0.5)
torch.testing.assert_close(got, x + 0.5 * y)
print(f"{k.__name__}.scale_add(x, y, 0.5) matches x + 0.5 * y on 4096 floats (loaded in {loaded * 1000:.0f} ms)")
"""


def run_demo(workdir: Path | None = None, say=print) -> Path:
    base = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="kbuild-demo-"))
    root = base / "kbuild-demo"
    scaffold(root, "kbuild-demo", ["cpu"])
    say(f"scaffolded {root}")
    start = time.perf_counter()
    _, report = build_kernel(root)
    results = report.results
    built = [r for r in results if r.status in ("built", "up-to-date")]
    failed = [r for r in results if r.status == "failed"]
    if failed or not built:
        raise KbuildError(f"demo build failed: {failed[0].detail if failed else 'no buildable variant'}")
    say(f"built {root / 'build' / built[0].variant} in {time.perf_counter() - start:.1f} s")
    check = subprocess.run([sys.executable, "-c", _CHECK, str(root)], capture_output=True, text=True, check=False)
    if check.returncode != 0:
        tail = (check.stderr.strip().splitlines() or ["no output"])[-1]
        raise KbuildError(f"demo kernel did not load or compute correctly: {tail}")
    say(check.stdout.strip())
    return root
