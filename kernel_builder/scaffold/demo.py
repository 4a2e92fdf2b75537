"""`kbuild demo`: the quick start's smoke test. Scaffold the embedded example kernel,
build it for this machine, load it with the runtime and check its op against torch. It
lives in a fixed folder of kbuild's cache, so a second demo finds its build up to date."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kernel_builder.pipeline.build_kernel import build_kernel
from kernel_builder.errors import KbuildError
from kernel_builder.file_lock import exclusive_lock
from kernel_builder.paths import cache_dir, short_key
from kernel_builder.runners.progress import Progress
from kernel_builder.scaffold.new_kernel import scaffold

DEMO_NAME = "kbuild-demo"

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


def run_demo(workdir: Path | None = None, say=print, progress: Progress | None = None) -> Path:
    """Scaffold (or reuse), build, load and call the demo kernel in `workdir` (default: a
    fixed folder in kbuild's cache, so the next demo finds its build up to date); `progress`
    shows the build as `kbuild build` does. Returns the kernel's folder."""
    base = Path(workdir) if workdir else cache_dir("demo")
    base.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(cache_dir("locks") / f"demo-{short_key(str(base.resolve()))}.lock"):
        root, reused = demo_kernel(base)
        say(f"{'reusing' if reused else 'scaffolded'} {root}")
        start = time.perf_counter()
        _, report = build_kernel(root, progress=progress)
    results = report.results
    built = [r for r in results if r.status in ("built", "up-to-date")]
    failed = [r for r in results if r.status == "failed"]
    if failed or not built:
        raise KbuildError(f"demo build failed: {failed[0].detail if failed else 'no buildable variant'}")
    what = "up to date" if built[0].status == "up-to-date" else "built"
    say(f"{what}: {root / 'build' / built[0].variant} in {time.perf_counter() - start:.1f} s")
    check = subprocess.run([sys.executable, "-c", _CHECK, str(root)], capture_output=True, text=True, check=False)
    if check.returncode != 0:
        tail = (check.stderr.strip().splitlines() or ["no output"])[-1]
        raise KbuildError(f"demo kernel did not load or compute correctly: {tail}")
    say(check.stdout.strip())
    return root


def demo_kernel(base: Path) -> tuple[Path, bool]:
    """The demo kernel at base/kbuild-demo, and whether it was kept: it is while it holds
    what this kbuild scaffolds (so its build/ stays up to date), else it is written afresh.
    The scaffold is staged in a folder beside it that goes in any case (an error, Ctrl-C)."""
    root = base / DEMO_NAME
    staging = Path(tempfile.mkdtemp(prefix=f".{DEMO_NAME}-new-", dir=base))
    try:
        fresh = staging / DEMO_NAME
        written = scaffold(fresh, DEMO_NAME, ["cpu"])
        if root.is_dir() and all(_same_file(f, root / f.relative_to(fresh)) for f in written):
            return root, True
        if root.exists():
            os.replace(root, staging / "previous")  # removed with the staging folder
        os.replace(fresh, root)
        return root, False
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _same_file(new: Path, old: Path) -> bool:
    try:
        return old.read_bytes() == new.read_bytes()
    except OSError:
        return False
