"""Kernel vs PyTorch eager vs torch.compile vs a plain copy of the same bytes, side by
side, in one run.

    kbuild build examples/layer-norm
    python examples/layer-norm/benchmarks/compare_eager.py [--threads N]
        [--dtypes fp32 bf16] [--tokens 2048 8192] [--hidden 2048 4096] [--reps 15]
        [--backward] [--device cpu|cuda]

For every op, dtype and shape, the kernel, its eager reference, the same
expression under ``torch.compile`` (its generated kernels; compiled once
before timing) and a plain copy run in alternation (interleaved repetitions,
so that a noisy neighbour slows them all), and the medians are compared. All are charged the bytes the
fused op must move (each input read once, each output written once) for the
GB/s columns. All allocate their outputs, as a caller would.

The copy moves those same bytes with no arithmetic: ``x.clone()`` for a norm,
``x.clone()`` and ``residual.clone()`` for add+norm, ``gate + up`` for
silu_and_mul, ``x + dy`` for a backward. It is what memory allows: "ceiling"
= eager ms / copy ms is the most any kernel that reads its inputs and writes
its outputs once can gain over eager here. (A kernel can still beat it where
it allocates more cheaply than a clone: the CPU ops advise huge pages for
large outputs, see layer_norm_cpu/.)

"stream GB/s" is the memory system's own speed over x's bytes under the same
conditions: ``dest.copy_(x)`` into a preallocated tensor (no allocation, no
page faults), interleaved with the others. "% stream" is the kernel's GB/s as
a share of it.

References (what the layers replace):
- rms_norm: the LlamaRMSNorm expression (fp32 upcast, pow, mean, rsqrt,
  downcast, weight multiply).
- layer_norm: F.layer_norm (a fused ATen kernel).
- add+rms_norm / add+layer_norm: ``s = x + residual`` then the above.
- silu_and_mul: ``F.silu(x[..., :d]) * x[..., d:]``.
- --backward: the autograd backward of each pair (grad of input and weight).
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


def load_kernel():
    try:
        from kernel_builder.runtime import load_local
    except ImportError:
        import kernels

        return kernels.get_local_kernel(ROOT, backend="cpu")
    return load_local(ROOT)


def llama_rms_norm(x, weight, eps):
    dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return weight * h.to(dtype)


def prenorm(norm, x, residual):
    s = x + residual
    return norm(s), s


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def bench_interleaved(fns, reps, device):
    """Median seconds of each fn, run in alternation."""
    for fn in fns:  # warm-up (and first-touch of any cached state)
        fn()
        fn()
    times = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            times[i].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def compiled(fn):
    """torch.compile's generated kernel for the eager expression `fn`. Each shape
    recompiles the same lambdas, so dynamo's caches are reset first: otherwise it
    stops at its recompile limit and runs them eagerly."""
    torch._dynamo.reset()
    return torch.compile(fn, dynamic=False)


def cases(ln, x, w, b, r, g, eps, backward):
    """(name, kernel fn, reference fn, compiled reference fn, copy fn, bytes moved) for one
    shape and dtype."""
    es = x.element_size()
    nbytes = x.numel() * es
    wb = w.numel() * es
    copy1 = x.clone  # reads x, writes as much: what a norm moves
    copy2 = lambda: (x.clone(), r.clone())  # two in, two out: add+norm
    if not backward:
        yield (
            "rms_norm",
            lambda: ln.rms_norm(x, w, eps),
            lambda: llama_rms_norm(x, w, eps),
            compiled(lambda: llama_rms_norm(x, w, eps)),
            copy1,
            2 * nbytes + wb,
        )
        yield (
            "layer_norm",
            lambda: ln.layer_norm(x, w, b, eps),
            lambda: F.layer_norm(x, x.shape[-1:], w, b, eps),
            compiled(lambda: F.layer_norm(x, x.shape[-1:], w, b, eps)),
            copy1,
            2 * nbytes + 2 * wb,
        )
        yield (
            "add+rms_norm",
            lambda: ln.rms_norm(x, w, eps, residual=r),
            lambda: prenorm(lambda s: llama_rms_norm(s, w, eps), x, r),
            compiled(lambda: prenorm(lambda s: llama_rms_norm(s, w, eps), x, r)),
            copy2,
            4 * nbytes + wb,
        )
        yield (
            "add+layer_norm",
            lambda: ln.layer_norm(x, w, b, eps, residual=r),
            lambda: prenorm(lambda s: F.layer_norm(s, s.shape[-1:], w, b, eps), x, r),
            compiled(lambda: prenorm(lambda s: F.layer_norm(s, s.shape[-1:], w, b, eps), x, r)),
            copy2,
            4 * nbytes + 2 * wb,
        )
        d = g.shape[-1] // 2
        yield (
            "silu_and_mul",
            lambda: ln.silu_and_mul(g),
            lambda: F.silu(g[..., :d]) * g[..., d:],
            compiled(lambda: F.silu(g[..., :d]) * g[..., d:]),
            lambda: g[..., :d] + g[..., d:],
            g.numel() * es * 3 // 2,
        )
        return

    xg = x.detach().requires_grad_()
    wg = w.detach().requires_grad_()
    bg = b.detach().requires_grad_()
    dy = torch.randn_like(x)

    def backward_of(forward):
        y = forward()

        def run():
            torch.autograd.grad(y, (xg, wg), dy, retain_graph=True)

        return run

    # Reads x, dy (and the saved stats), writes grad_x; grad_w is small.
    moved = 3 * nbytes + 2 * wb
    copy3 = lambda: x + dy  # two in, one out
    yield (
        "rms_norm bwd",
        backward_of(lambda: ln.rms_norm(xg, wg, eps)),
        backward_of(lambda: llama_rms_norm(xg, wg, eps)),
        backward_of(compiled(lambda: llama_rms_norm(xg, wg, eps))),
        copy3,
        moved,
    )
    yield (
        "layer_norm bwd",
        backward_of(lambda: ln.layer_norm(xg, wg, bg, eps)),
        backward_of(lambda: F.layer_norm(xg, xg.shape[-1:], wg, bg, eps)),
        backward_of(compiled(lambda: F.layer_norm(xg, xg.shape[-1:], wg, bg, eps))),
        copy3,
        moved,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=sorted(DTYPES))
    parser.add_argument("--tokens", nargs="+", type=int, default=[2048, 8192])
    parser.add_argument("--hidden", nargs="+", type=int, default=[2048, 4096])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--backward", action="store_true", help="time the backward instead")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    ln = load_kernel()
    device = args.device
    print(
        f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} threads, "
        f"avx512 path: {ln.avx512_enabled()}, eps as Llama (1e-6) / LayerNorm (1e-5)"
    )
    header = (
        f"{'op':<16}{'dtype':<6}{'shape':>14}  {'kernel ms':>10}{'GB/s':>7}  {'eager ms':>10}{'GB/s':>7}  "
        f"{'speedup':>8}  {'compile ms':>10}{'speedup':>8}  {'copy ms':>9}{'GB/s':>7}  {'ceiling':>8}"
        f"  {'stream GB/s':>11}{'% stream':>9}"
    )
    print(header)
    print("-" * len(header))
    torch.manual_seed(0)
    for dname in args.dtypes:
        dtype = DTYPES[dname]
        for tokens in args.tokens:
            for hidden in args.hidden:
                x = torch.randn(tokens, hidden, dtype=dtype, device=device)
                r = torch.randn_like(x)
                w = torch.randn(hidden, dtype=dtype, device=device)
                b = torch.randn(hidden, dtype=dtype, device=device)
                g = torch.randn(tokens, 2 * hidden, dtype=dtype, device=device)
                copy_dest = torch.empty_like(x)
                for name, ours, ref, comp, copy, moved in cases(ln, x, w, b, r, g, 1e-6, args.backward):
                    t_ours, t_ref, t_comp, t_copy, t_stream = bench_interleaved(
                        [ours, ref, comp, copy, lambda: copy_dest.copy_(x)], args.reps, device
                    )
                    stream = 2 * x.numel() * x.element_size() / t_stream
                    shape = f"{tokens}x{hidden}"
                    rate = moved / t_ours / 1e9
                    print(
                        f"{name:<16}{dname:<6}{shape:>14}  {t_ours * 1e3:>10.3f}{rate:>7.1f}  "
                        f"{t_ref * 1e3:>10.3f}{moved / t_ref / 1e9:>7.1f}  {t_ref / t_ours:>7.2f}x  "
                        f"{t_comp * 1e3:>10.3f}{t_comp / t_ours:>7.2f}x  "
                        f"{t_copy * 1e3:>9.3f}{moved / t_copy / 1e9:>7.1f}  {t_ref / t_copy:>7.2f}x"
                        f"  {stream / 1e9:>11.1f}{rate * 1e9 / stream * 100:>8.0f}%",
                        flush=True,
                    )
                del x, r, w, b, g
    return 0


if __name__ == "__main__":
    sys.exit(main())
