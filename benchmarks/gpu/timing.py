"""Timing on one device, CUDA or CPU: interleaved repetitions, medians.

The candidates of one comparison run in alternation (a, b, c, a, b, c, ...), so a
noisy neighbour or a clock change slows them all alike; each call is timed on its
own (CUDA events on a GPU, the wall clock around a synchronize on a CPU) and the
median of each is compared.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence

import torch


class DeviceTimer:
    """Times one call on `device` ("cuda" or "cpu"), in seconds."""

    def __init__(self, device: str):
        self.device = device

    def __call__(self, fn: Callable[[], object]) -> float:
        if self.device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        begin = time.perf_counter()
        fn()
        return time.perf_counter() - begin


def interleaved_medians(fns: Sequence[Callable[[], object]], reps: int, device: str, warmup: int = 2) -> list[float]:
    """Median seconds per call of each of `fns`, run in alternation."""
    timer = DeviceTimer(device)
    for fn in fns:
        for _ in range(warmup):
            fn()
    if device == "cuda":
        torch.cuda.synchronize()
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):
            samples[i].append(timer(fn))
    return [statistics.median(s) for s in samples]


def copy_bandwidth(nbytes: int, device: str, reps: int) -> float:
    """Bytes per second of `dst.copy_(src)` over `nbytes`, counting the bytes read and
    written (2 * nbytes): the memory system's own speed for a plain stream, with no
    allocation and no arithmetic."""
    elements = max(nbytes // 4, 1)
    src = torch.randn(elements, device=device)
    dst = torch.empty_like(src)
    (seconds,) = interleaved_medians([lambda: dst.copy_(src)], reps, device)
    return 2 * elements * 4 / seconds
