"""get_kernel on a cached variant: kbuild's runtime against `kernels.get_kernel`.

One local test Hub (kernel_builder.testing.HubServer) serves a small pure-Python kernel
(`kernels-community/relu`, branch v1, build/torch-cpu and build/torch-cuda). Each library
loads it once to warm the shared huggingface_hub cache, then each load is timed in a fresh
interpreter, alternating, RUNS times:

- call: from the get_kernel call to the module being ready (torch and the library are
  imported before the clock starts: both need torch, and `import kernels` pulls in
  huggingface_hub, which kbuild imports only inside the call);
- import + call: the same, with the library's import counted;
- kbuild offline (HF_HUB_OFFLINE=1): the call, with no request at all;
- kbuild by commit (revision=<sha>, as a kernels.lock load does), online: no request either.

Both run in their default signature mode (the test kernel is unsigned), as a user's program
would; KBUILD_SIGNATURES set for this script applies to kbuild's loads. With `--baseline DIR` (another kbuild source tree, e.g. `git archive main kernel_builder
| tar -x -C DIR`), that tree's `get_kernel` is timed in the same rounds as "kbuild baseline",
so a before/after comparison shares one machine state.

It also counts the Hub requests one warm load makes. Prints medians and the ratios.

Usage: python benchmarks/bench_get_kernel.py [RUNS] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "runtime"))
sys.path.insert(0, str(REPO / "tests"))

from test_runtime_hub import RELU, client_env, publish

from kernel_builder.testing import HubServer

LOAD = textwrap.dedent(
    """
    import json, sys, time
    import torch  # both runtimes need it; not charged to either
    t0 = time.perf_counter()
    if sys.argv[1] == "kbuild":
        from kernel_builder.runtime import get_kernel
        t1 = time.perf_counter()
        module = get_kernel(sys.argv[2], version=1) if len(sys.argv) < 4 else get_kernel(sys.argv[2], revision=sys.argv[3])
    else:
        import kernels
        t1 = time.perf_counter()
        module = kernels.get_kernel(sys.argv[2], version=1, backend="cpu")
    t2 = time.perf_counter()
    assert module.value == 12, module.value
    print(json.dumps({"import": t1 - t0, "call": t2 - t1}))
    """
)


def load(which: str, env: dict, *revision: str, source: Path = REPO) -> dict:
    # cwd and PYTHONPATH pick the kbuild tree that is imported.
    env = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, "-W", "ignore", "-c", LOAD, which, RELU, *revision], env=env,
                            cwd=source, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{which} load failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def cleanup(folder: Path):
    """The test Hub's repos and the client caches are only for this run."""
    try:
        yield
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="?", type=int, default=7)
    parser.add_argument("--baseline", type=Path, help="another kbuild source tree, timed in the same rounds")
    args = parser.parse_args()
    runs = args.runs
    work = Path(tempfile.mkdtemp(prefix="kbuild-bench-get-kernel-"))
    with cleanup(work), HubServer(work / "hub") as server:
        commits = publish(server, work, RELU, [("v1.0.0", "v1", "v1.0.0", 10), ("v1-head", "v1", None, 12)])
        env = client_env(server, work)
        # The default (warn), as a user runs it, unless this script's environment sets a mode.
        env.pop("KBUILD_SIGNATURES")
        env.update({k: v for k, v in os.environ.items() if k == "KBUILD_SIGNATURES"})
        offline = dict(env, HF_HUB_OFFLINE="1")

        counts = {}
        for which in ("kbuild", "kernels"):
            load(which, env)  # warm: downloads the variant
            before = len(server.requests)
            load(which, env)
            counts[which] = [f"{r.method} {r.path.split('?')[0]}" for r in server.requests[before:]]

        before = len(server.requests)
        load("kbuild", env, commits["v1-head"])
        counts["kbuild by commit"] = [f"{r.method} {r.path}" for r in server.requests[before:]]

        times: dict[str, list[dict]] = {"kbuild": [], "kernels": [], "kbuild offline": [], "kbuild by commit": []}
        for _ in range(runs):
            times["kbuild"].append(load("kbuild", env))
            times["kernels"].append(load("kernels", env))
            times["kbuild offline"].append(load("kbuild", offline))
            times["kbuild by commit"].append(load("kbuild", env, commits["v1-head"]))
            if args.baseline:
                times.setdefault("kbuild baseline", []).append(load("kbuild", env, source=args.baseline.resolve()))

    print(f"get_kernel on a cached variant, median of {runs} fresh interpreters each (test Hub on loopback):")
    print(f"{'':16} {'call':>10} {'import+call':>12}  requests per warm load")
    medians = {}
    for which, samples in times.items():
        call = median_ms([s["call"] for s in samples])
        total = median_ms([s["import"] + s["call"] for s in samples])
        medians[which] = (call, total)
        requests = len(counts[which]) if which in counts else "-"
        print(f"{which:16} {call:8.1f} ms {total:9.1f} ms  {requests}")
    (ours_call, ours_total), (theirs_call, theirs_total) = medians["kbuild"], medians["kernels"]
    print(f"kernels / kbuild: call {theirs_call / ours_call:.2f}x, import+call {theirs_total / ours_total:.2f}x; "
          f"kernels / kbuild offline: call {theirs_call / medians['kbuild offline'][0]:.2f}x")
    if args.baseline:
        before_call, before_total = medians["kbuild baseline"]
        print(f"kbuild baseline / kbuild: call {before_call / ours_call:.2f}x, import+call {before_total / ours_total:.2f}x")
    for which, requests in counts.items():
        print(f"{which} warm requests: " + ("; ".join(requests) or "none"))


if __name__ == "__main__":
    main()
