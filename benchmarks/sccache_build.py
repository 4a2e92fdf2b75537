"""One timed `kbuild build --compiler-cache-tool sccache --json` of one variant, for the
shared-cache and dist-compile benchmarks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def timed_build(checkout: Path, variant: str, out: Path, env: dict[str, str], extra: list[str], label: str) -> tuple[float, dict]:
    """Wall seconds and the job's JSON report; `env` is added to os.environ, `extra` to the
    command line. A failed build ends the benchmark, naming `label`."""
    command = [sys.executable, "-m", "kernel_builder.cli", "build", str(checkout), "--variant", variant,
               "--out", str(out), "--compiler-cache-tool", "sccache", "--json", *extra]
    start = time.perf_counter()
    result = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"{label} failed to build {variant}:\n{result.stderr[-3000:]}")
    (job,) = json.loads(result.stdout)["jobs"]
    return seconds, job
