"""The swiglu ops against PyTorch eager, side by side in one run.

    python benchmarks/compare_eager.py                 # after `kbuild build examples/swiglu`
    python benchmarks/compare_eager.py --dtypes bf16 --shapes 2048x4096 --backward
    SWIGLU_DISABLE_AVX512=1 python benchmarks/compare_eager.py   # the portable path

For each op, dtype and (tokens, d) shape, the kernel and the eager reference
run interleaved (kernel, eager, kernel, ...), each call timed on its own, and
the medians are compared (with ``torch.compile`` of the same eager expression
too, its generated kernel compiled in the warm-up):

* forward: ``swiglu.<op>(x)`` against ``act(x[..., :d]) * x[..., d:]`` with
  ``act`` = ``F.silu``, ``F.gelu`` or ``F.gelu(approximate="tanh")``. Both
  allocate their output, as a model's forward does: the kernel as its API
  does (results of 32 MiB and more on transparent huge pages, see
  swiglu_cpu/huge_pages.cpp; ``SWIGLU_DISABLE_HUGE_PAGES=1`` for torch's
  allocator), eager with torch's allocator (``THP_MEM_ALLOC_ENABLE=1`` puts
  every torch tensor on huge pages, for a comparison with equal allocation).
  ``out=`` is the kernel writing into a preallocated tensor (no allocation, no
  first-touch page faults), shown for reference.
* backward (``--backward``): the kernel's ``<op>_backward`` op against eager
  autograd's backward of the composite (the graph built once beforehand, so
  only the backward is timed).

GB/s counts the bytes the fused op must move (forward: the (tokens, 2d) input
read once, the (tokens, d) output written once; backward: input and grad_out
read, grad_input written), for both columns, so that they compare directly.
"stream GB/s" is ``dest.copy_(x)`` into a preallocated tensor over the input's
bytes (read and written), interleaved with the others: the memory system's own
speed under the same conditions; "% stream" is the kernel's GB/s as a share of it.
"""

import argparse
import os
import pathlib
import statistics
import time

import torch
import torch.nn.functional as F

KERNEL_ROOT = pathlib.Path(__file__).resolve().parents[1]

# (tokens, d): prefill-sized batches at LLaMA-7B (d = 11008) and smaller MLP widths.
SHAPES = [(2048, 4096), (2048, 11008), (8192, 4096), (8192, 11008)]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
OPS = {
    "silu_and_mul": F.silu,
    "gelu_and_mul": F.gelu,
    "gelu_tanh_and_mul": lambda g: F.gelu(g, approximate="tanh"),
}


def load(path: pathlib.Path):
    try:
        from kernel_builder.runtime import load_local
    except ImportError:
        import kernels

        return kernels.get_local_kernel(path, backend="cpu")
    return load_local(path)


def interleaved_medians(fns: dict, repeats: int) -> dict:
    """Median seconds per call of each function, calls interleaved round-robin."""
    for fn in fns.values():  # warm up (and touch every code path once)
        fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def row(op: str, dtype_name: str, tokens: int, d: int, t: dict, moved: float, x: torch.Tensor) -> str:
    rate = moved / t["kernel"]
    stream = 2 * x.numel() * x.element_size() / t["copy"]  # bytes read and written
    return (
        f"{op:<26} {dtype_name:<5} {tokens:>6} {d:>6} {t['kernel'] * 1e3:>10.2f} {t['eager'] * 1e3:>9.2f}"
        f" {t['eager'] / t['kernel']:>5.2f}x {t['compile'] * 1e3:>10.2f} {t['compile'] / t['kernel']:>5.2f}x"
        f" {rate / 1e9:>11.1f} {moved / t['eager'] / 1e9:>10.1f} {t['out'] * 1e3:>8.2f}"
        f" {stream / 1e9:>11.1f} {rate / stream * 100:>7.0f}%"
    )


def parse_shape(text: str) -> tuple:
    tokens, d = text.lower().split("x")
    return int(tokens), int(d)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", type=pathlib.Path, default=KERNEL_ROOT, help="kernel root, build/ or variant folder")
    parser.add_argument("--ops", nargs="+", choices=list(OPS), default=list(OPS))
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=["fp32", "bf16"])
    parser.add_argument("--shapes", nargs="+", type=parse_shape, default=SHAPES, help="TOKENSxD, e.g. 2048x11008")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per function (median)")
    parser.add_argument("--backward", action="store_true", help="also time the backward ops")
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    swiglu = load(args.path)
    path = "AVX-512" if swiglu.avx512_enabled() else "portable (at::vec)"
    print(f"swiglu CPU path: {path}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    flags = {v: os.environ.get(v, "") for v in ("SWIGLU_DISABLE_HUGE_PAGES", "THP_MEM_ALLOC_ENABLE")}
    print("allocation: " + ", ".join(f"{k}={v or '(unset)'}" for k, v in flags.items()))
    header = (
        f"{'op':<26} {'dtype':<5} {'tokens':>6} {'d':>6} {'kernel ms':>10} {'eager ms':>9} {'ratio':>6}"
        f" {'compile ms':>10} {'ratio':>6} {'kernel GB/s':>11} {'eager GB/s':>10} {'out= ms':>8}"
        f" {'stream GB/s':>11} {'% stream':>8}"
    )
    print(header)
    print("-" * len(header))
    for op in args.ops:
        act = OPS[op]
        for dtype_name in args.dtypes:
            dtype = DTYPES[dtype_name]
            for tokens, d in args.shapes:
                x = torch.randn(tokens, 2 * d).to(dtype)
                if hasattr(swiglu.ops, "new_output"):  # what the API allocates results with on CPU
                    new_result = lambda shape: swiglu.ops.new_output(list(shape), x.dtype)  # noqa: E731
                else:
                    new_result = lambda shape: torch.empty(shape, dtype=x.dtype)  # noqa: E731
                eager = lambda: act(x[..., :d]) * x[..., d:]  # noqa: E731
                kernel = getattr(swiglu, op)
                torch.testing.assert_close(kernel(x), eager(), rtol=2e-2, atol=2e-2)
                out = torch.empty(tokens, d, dtype=dtype)
                copy_dest = torch.empty_like(x)
                stream_copy = lambda: copy_dest.copy_(x)  # noqa: E731
                # Its generated kernel, compiled in the warm-up; a reset first, as every shape
                # recompiles the same lambda and dynamo stops at its recompile limit.
                torch._dynamo.reset()
                compiled = torch.compile(eager, dynamic=False)
                t = interleaved_medians(
                    {"kernel": lambda: kernel(x), "eager": eager, "compile": compiled, "out": lambda: kernel(x, out=out),
                     "copy": stream_copy},
                    args.repeats,
                )
                moved = x.numel() * x.element_size() * 3 / 2
                print(row(op, dtype_name, tokens, d, t, moved, x))
                if args.backward:
                    backward_op = getattr(swiglu.ops, op + "_backward")
                    grad_out = torch.randn(tokens, d).to(dtype)
                    xr = x.detach().requires_grad_()
                    y = act(xr[..., :d]) * xr[..., d:]
                    torch._dynamo.reset()
                    y_compiled = torch.compile(lambda: act(xr[..., :d]) * xr[..., d:], dynamic=False)()
                    grad_input = torch.empty_like(x)
                    t = interleaved_medians(
                        {
                            # A fresh gradient, allocated as the autograd backward does.
                            "kernel": lambda: backward_op(new_result(x.shape), grad_out, x),
                            "eager": lambda: torch.autograd.grad(y, xr, grad_out, retain_graph=True),
                            "compile": lambda: torch.autograd.grad(y_compiled, xr, grad_out, retain_graph=True),
                            "out": lambda: backward_op(grad_input, grad_out, x),
                            "copy": stream_copy,
                        },
                        args.repeats,
                    )
                    moved = x.numel() * x.element_size() * 5 / 2
                    print(row(op + "_backward", dtype_name, tokens, d, t, moved, x))
                    del y, y_compiled, xr, grad_out, grad_input
                del x, out


if __name__ == "__main__":
    main()
