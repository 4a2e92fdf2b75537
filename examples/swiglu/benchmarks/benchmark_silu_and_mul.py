"""Throughput of the swiglu kernel against the PyTorch reference on CPU.

    python benchmarks/benchmark_silu_and_mul.py              # after `kbuild build examples/swiglu`
    SWIGLU_DISABLE_AVX512=1 python benchmarks/benchmark_silu_and_mul.py   # portable path

Throughput counts the bytes the op must move: the (rows, 2*d) input read once and
the (rows, d) output written once. The reference, F.silu(x[..., :d]) * x[..., d:],
moves more (it writes and re-reads the silu intermediate), but is charged the
same bytes so that the columns compare directly. "kernel" and "torch" both
allocate their result, as the functional API does; "out=" is the kernel
writing into a preallocated tensor, which leaves out the allocation and the
first-touch page faults of a fresh output (large for big shapes).
"""

import argparse
import pathlib
import statistics
import time

import torch
import torch.nn.functional as F

KERNEL_ROOT = pathlib.Path(__file__).resolve().parents[1]

SHAPES = [
    (1, 2 * 4096),  # one decode token, LLaMA-7B-like width
    (1, 2 * 14336),
    (16, 2 * 11008),
    (128, 2 * 11008),
    (512, 2 * 4096),
    (1024, 2 * 14336),
]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def load(path: pathlib.Path):
    try:
        from kernel_builder.runtime import load_local
    except ImportError:
        import kernels

        return kernels.get_local_kernel(path, backend="cpu")
    return load_local(path)


def reference(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def bench(fn, x, min_time: float) -> float:
    """Median seconds per call over batches that each take about min_time / 5."""
    for _ in range(3):
        fn(x)
    n, start = 1, time.perf_counter()
    while True:  # calibrate the batch size
        start = time.perf_counter()
        for _ in range(n):
            fn(x)
        elapsed = time.perf_counter() - start
        if elapsed > min_time / 5:
            break
        n *= 2
    samples = [elapsed / n]
    for _ in range(4):
        start = time.perf_counter()
        for _ in range(n):
            fn(x)
        samples.append((time.perf_counter() - start) / n)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", type=pathlib.Path, default=KERNEL_ROOT, help="kernel root, build/ or variant folder")
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--min-time", type=float, default=0.5, help="seconds spent per measurement")
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    swiglu = load(args.path)
    path = "AVX-512" if swiglu.avx512_enabled() else "portable (at::vec)"
    print(f"swiglu CPU path: {path}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    header = (
        f"{'dtype':<5} {'shape':>16} {'kernel GB/s':>12} {'torch GB/s':>11} {'speedup':>8}"
        f" {'out= GB/s':>10} {'kernel us':>10} {'torch us':>9}"
    )
    print(header)
    print("-" * len(header))
    for name in args.dtypes:
        dtype = DTYPES[name]
        for rows, width in SHAPES:
            x = torch.randn(rows, width).to(dtype)
            torch.testing.assert_close(swiglu.silu_and_mul(x), reference(x), rtol=2e-2, atol=1e-2)
            moved = x.numel() * x.element_size() * 3 // 2
            out = torch.empty(rows, width // 2, dtype=dtype)
            t_kernel = bench(swiglu.silu_and_mul, x, args.min_time)
            t_ref = bench(reference, x, args.min_time)
            t_out = bench(lambda t: swiglu.silu_and_mul(t, out=out), x, args.min_time)
            print(
                f"{name:<5} {str((rows, width)):>16} {moved / t_kernel / 1e9:>12.2f} {moved / t_ref / 1e9:>11.2f}"
                f" {t_ref / t_kernel:>7.2f}x {moved / t_out / 1e9:>10.2f} {t_kernel * 1e6:>10.1f} {t_ref * 1e6:>9.1f}"
            )


if __name__ == "__main__":
    main()
