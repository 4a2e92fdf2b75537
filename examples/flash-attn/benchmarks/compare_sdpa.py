"""flash_attn_func against torch.nn.functional.scaled_dot_product_attention, side by side.

For each (dtype, seqlen, head_dim, causal) the two are timed in interleaved repetitions
(ours, SDPA, ours, SDPA, ...) so that both see the same machine load, and the medians
are compared. The forward is charged 4 * seqlen^2 * head_dim * heads * batch FLOP (half
that when causal), the backward 2.5x the forward (flash-attn's convention), which
gives the GFLOP/s columns. Not a test: it prints a table.

    python benchmarks/compare_sdpa.py                      # forward, the full grid
    python benchmarks/compare_sdpa.py --backward           # forward and backward
    python benchmarks/compare_sdpa.py --threads 1 --seqlens 2048 --dtypes fp32
    python benchmarks/compare_sdpa.py --clock thread       # CPU time of one thread

``--clock thread`` (with ``--threads 1``) measures the calling thread's CPU time instead of
wall time: on a machine shared with other jobs it counts only the time the benchmark ran.
Run it from anywhere after ``kbuild build examples/flash-attn``.
"""

import argparse
import pathlib
import statistics
import sys
import time

import torch
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parents[1]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def load():
    try:
        from kernel_builder.runtime import load_local

        return load_local(ROOT)
    except ImportError:
        import kernels

        return kernels.get_local_kernel(ROOT, backend="cpu")


def timed(fn, clock):
    start = clock()
    fn()
    return clock() - start


def compare(ours, theirs, reps, clock):
    ours(), theirs()  # warm-up (allocations, first-call dispatch)
    a, b = [], []
    for _ in range(reps):
        a.append(timed(ours, clock))
        b.append(timed(theirs, clock))
    return statistics.median(a), statistics.median(b)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=sorted(DTYPES))
    parser.add_argument("--seqlens", nargs="+", type=int, default=[1024, 2048, 4096])
    parser.add_argument("--head-dims", nargs="+", type=int, default=[64, 128])
    parser.add_argument("--causal", nargs="+", default=["no", "yes"], choices=["no", "yes"])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--backward", action="store_true", help="also time the backward")
    parser.add_argument("--clock", choices=["wall", "thread"], default="wall")
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    clock = time.perf_counter if args.clock == "wall" else time.thread_time
    if args.clock == "thread" and torch.get_num_threads() != 1:
        parser.error("--clock thread needs --threads 1 (other threads' time would not count)")
    fa = load()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, kernel ISA {fa.cpu_isa()}, "
          f"batch {args.batch}, heads {args.heads}, median of {args.reps} interleaved reps ({args.clock} clock)")
    header = f"{'dtype':5} {'seqlen':>6} {'d':>4} {'causal':6} | {'pass':4} | {'ours ms':>9} {'GF/s':>6} | {'sdpa ms':>9} {'GF/s':>6} | ratio"
    print(header)
    print("-" * len(header))

    torch.manual_seed(0)
    for name in args.dtypes:
        dtype = DTYPES[name]
        for s in args.seqlens:
            for d in args.head_dims:
                for causal in (c == "yes" for c in args.causal):
                    shape = (args.batch, s, args.heads, d)
                    q, k, v = (torch.randn(shape, dtype=dtype) for _ in range(3))
                    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))  # SDPA's layout, same storage
                    flop = 4 * args.batch * args.heads * s * s * d * (0.5 if causal else 1.0)
                    fwd = compare(
                        lambda: fa.flash_attn_func(q, k, v, causal=causal),
                        lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal),
                        args.reps, clock,
                    )
                    rows = [("fwd", fwd, flop)]
                    if args.backward:
                        qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
                        out = fa.flash_attn_func(qg, kg, vg, causal=causal)
                        qs, ks, vs = (t.transpose(1, 2) for t in (qg, kg, vg))
                        ref = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
                        g = torch.randn_like(out)
                        gt = g.transpose(1, 2)
                        bwd = compare(
                            lambda: torch.autograd.grad(out, (qg, kg, vg), g, retain_graph=True),
                            lambda: torch.autograd.grad(ref, (qg, kg, vg), gt, retain_graph=True),
                            args.reps, clock,
                        )
                        rows.append(("bwd", bwd, 2.5 * flop))
                    for label, (ours, theirs), work in rows:
                        print(
                            f"{name:5} {s:6d} {d:4d} {'yes' if causal else 'no':6} | {label:4} | "
                            f"{ours * 1e3:9.2f} {work / ours / 1e9:6.1f} | {theirs * 1e3:9.2f} {work / theirs / 1e9:6.1f} | "
                            f"{theirs / ours:5.2f}x",
                            flush=True,
                        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
