"""What the proof times: each example kernel against PyTorch on the same tensors.

Memory-bound ops (RMSNorm, LayerNorm, SwiGLU; forward and backward) are compared with
PyTorch eager and with `torch.compile` of the same eager expression, and reported as
achieved bandwidth and as a share of a plain copy's bandwidth over the same tensor,
measured in the same run (`timing.copy_bandwidth`). Attention (flash-attn forward and
backward) is compared with `F.scaled_dot_product_attention` pinned to its flash backend,
in FLOP/s. Every row also records how far the kernel's result is from the reference.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from timing import interleaved_medians

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# Largest |kernel - reference| / (1 + |reference|) a row accepts: the kernels compute in
# fp32 and round once; the references round between steps.
TOLERANCE = {torch.float32: 1e-3, torch.bfloat16: 5e-2, torch.float16: 1e-2}


@dataclass
class Row:
    example: str
    op: str
    direction: str  # "fwd" | "bwd"
    dtype: str
    shape: str
    kernel_ms: float | None = None
    baselines_ms: dict[str, float] = field(default_factory=dict)  # eager, compile, sdpa
    rate: str = ""  # "GB/s" | "TFLOP/s"
    kernel_rate: float | None = None
    copy_share: float | None = None  # memory-bound: kernel GB/s / copy GB/s
    error: float | None = None  # max relative difference to the reference
    ok: bool = False
    note: str = ""

    def speedup(self, baseline: str) -> float | None:
        other = self.baselines_ms.get(baseline)
        return other / self.kernel_ms if other and self.kernel_ms else None

    def to_json(self) -> dict:
        data = asdict(self)
        data["speedups"] = {name: self.speedup(name) for name in self.baselines_ms}
        return data


def relative_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    ours, reference = ours.float(), reference.float()
    return ((ours - reference).abs() / (1 + reference.abs())).max().item()


def failure_note(error: Exception) -> str:
    """One line for a row whose kernel raised: the error's type and first line."""
    lines = str(error).splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _first(result):
    """The output tensor of an op that may also return its residual sum."""
    return result[0] if isinstance(result, tuple) else result


def llama_rms_norm(x, weight, eps):
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def layer_norm_ref(x, weight, bias, eps):
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)


def silu_and_mul_ref(x):
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


@dataclass(frozen=True)
class MemoryBoundOp:
    """One op of an example kernel and its eager expression, over a (tokens, hidden) input."""

    example: str
    op: str
    kernel: Callable  # (module, tensors) -> output
    reference: Callable  # (tensors) -> output
    inputs: Callable  # (tokens, hidden, dtype, device) -> dict of tensors
    moved: Callable  # (tensors, direction) -> bytes the fused op must move
    grads: tuple[str, ...]  # inputs the backward differentiates


def _norm_inputs(tokens, hidden, dtype, device):
    return {
        "x": torch.randn(tokens, hidden, dtype=dtype, device=device),
        "w": torch.randn(hidden, dtype=dtype, device=device),
        "b": torch.randn(hidden, dtype=dtype, device=device),
    }


def _norm_bytes(t, direction):
    x = t["x"]
    n = x.numel() * x.element_size()
    # forward: read x, write y; backward: read x and dy, write dx (weights are small).
    return 2 * n if direction == "fwd" else 3 * n


def _swiglu_inputs(tokens, hidden, dtype, device):
    return {"x": torch.randn(tokens, 2 * hidden, dtype=dtype, device=device)}


def _swiglu_bytes(t, direction):
    n = t["x"].numel() * t["x"].element_size()
    # forward: read (tokens, 2d), write (tokens, d); backward: read x and dy, write dx.
    return n * 3 // 2 if direction == "fwd" else n * 5 // 2


MEMORY_BOUND_OPS = (
    MemoryBoundOp("layer-norm", "rms_norm", lambda m, t: m.rms_norm(t["x"], t["w"], 1e-6),
                  lambda t: llama_rms_norm(t["x"], t["w"], 1e-6), _norm_inputs, _norm_bytes, ("x", "w")),
    MemoryBoundOp("layer-norm", "layer_norm", lambda m, t: m.layer_norm(t["x"], t["w"], t["b"], 1e-5),
                  lambda t: layer_norm_ref(t["x"], t["w"], t["b"], 1e-5), _norm_inputs, _norm_bytes, ("x", "w")),
    MemoryBoundOp("swiglu", "silu_and_mul", lambda m, t: m.silu_and_mul(t["x"]),
                  lambda t: silu_and_mul_ref(t["x"]), _swiglu_inputs, _swiglu_bytes, ("x",)),
)


def backward_call(fn: Callable, tensors: dict, grads: tuple[str, ...], dy: torch.Tensor) -> Callable:
    """The backward of one forward of `fn` over leaf copies of `tensors` (the graph is
    built once here, so a call times the backward alone), returning the `grads`."""
    leaves = {k: v.detach().requires_grad_(k in grads) for k, v in tensors.items()}
    out = _first(fn(leaves))
    wrt = tuple(leaves[k] for k in grads)
    return lambda: torch.autograd.grad(out, wrt, dy, retain_graph=True)


def memory_bound_rows(examples, modules: dict, dtypes, shapes, device: str, reps: int,
                      copy_rate: Callable[[int], float]) -> Iterator[Row]:
    """One row per op of `examples`, dtype, shape and direction. `copy_rate(nbytes)` is
    the copy bandwidth over a tensor of nbytes, measured in this run."""
    for spec in (s for s in MEMORY_BOUND_OPS if s.example in examples):
        module = modules.get(spec.example)
        for dname in dtypes:
            dtype = DTYPES[dname]
            for tokens, hidden in shapes:
                torch.manual_seed(0)
                tensors = spec.inputs(tokens, hidden, dtype, device)
                copy = copy_rate(tensors["x"].numel() * tensors["x"].element_size())
                for direction in ("fwd", "bwd"):
                    row = Row(spec.example, spec.op, direction, dname, f"{tokens}x{hidden}", rate="GB/s")
                    if module is None:
                        row.note = "not built"
                        yield row
                        continue
                    try:
                        _time_memory_bound(row, spec, module, tensors, device, reps, copy)
                    except Exception as error:  # a failing kernel is a finding: keep its message
                        row.note = failure_note(error)
                    yield row


def _time_memory_bound(row: Row, spec: MemoryBoundOp, module, tensors, device, reps, copy_rate):
    kernel = lambda t: spec.kernel(module, t)
    # Every row recompiles the same reference: reset dynamo's caches, or it stops at its
    # recompile limit and runs the reference eagerly.
    torch._dynamo.reset()
    compiled = torch.compile(spec.reference, dynamic=False)
    if row.direction == "fwd":
        ours, ref = _first(kernel(tensors)), spec.reference(tensors)
        calls = [lambda: kernel(tensors), lambda: spec.reference(tensors), lambda: compiled(tensors)]
        row.error = relative_error(ours, ref)
    else:
        dy = torch.randn_like(spec.reference(tensors))
        k_bwd, e_bwd, c_bwd = (backward_call(f, tensors, spec.grads, dy) for f in (kernel, spec.reference, compiled))
        row.error = max(relative_error(a, b) for a, b in zip(k_bwd(), e_bwd()))
        calls = [k_bwd, e_bwd, c_bwd]
    ms = [t * 1e3 for t in interleaved_medians(calls, reps, device)]
    row.kernel_ms, row.baselines_ms = ms[0], {"eager": ms[1], "compile": ms[2]}
    moved = spec.moved(tensors, row.direction)
    row.kernel_rate = moved / (ms[0] / 1e3) / 1e9
    row.copy_share = row.kernel_rate * 1e9 / copy_rate
    row.ok = row.error <= TOLERANCE[tensors["x"].dtype] * (4 if row.direction == "bwd" else 1)


def _sdpa_flash():
    """SDPA pinned to its flash backend (the fair opponent of a flash kernel)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.FLASH_ATTENTION)


def attention_rows(module, dtypes, seqlens, head_dims, device: str, reps: int,
                   tokens: int, heads: int) -> Iterator[Row]:
    """flash_attn_func against SDPA (flash backend) over (batch, seqlen, heads, d) with
    batch * seqlen = `tokens`, causal and not."""
    for dname in dtypes:
        dtype = DTYPES[dname]
        for d in head_dims:
            for seqlen in seqlens:
                for causal in (False, True):
                    batch = max(1, tokens // seqlen)
                    torch.manual_seed(0)
                    q, k, v = (torch.randn(batch, seqlen, heads, d, dtype=dtype, device=device) for _ in range(3))
                    flops = 4 * batch * heads * seqlen * seqlen * d // (2 if causal else 1)
                    for direction in ("fwd", "bwd"):
                        row = Row("flash-attn", "causal" if causal else "full", direction, dname,
                                  f"b{batch} s{seqlen} h{heads} d{d}", rate="TFLOP/s")
                        if module is None:
                            row.note = "not built"
                        else:
                            try:
                                _time_attention(row, module, q, k, v, causal, device, reps,
                                                flops * (2.5 if direction == "bwd" else 1))
                            except Exception as error:
                                row.note = failure_note(error)
                        yield row


def _time_attention(row: Row, module, q, k, v, causal, device, reps, flops):
    def ours(t):
        return module.flash_attn_func(t["q"], t["k"], t["v"], causal=causal)

    def sdpa(t):
        with _sdpa_flash():
            out = F.scaled_dot_product_attention(*(t[n].transpose(1, 2) for n in "qkv"), is_causal=causal)
        return out.transpose(1, 2)

    tensors = {"q": q, "k": k, "v": v}
    if row.direction == "fwd":
        row.error = relative_error(ours(tensors), sdpa(tensors))
        calls = [lambda: ours(tensors), lambda: sdpa(tensors)]
    else:
        dy = torch.randn_like(q)
        o_bwd, s_bwd = (backward_call(f, tensors, ("q", "k", "v"), dy) for f in (ours, sdpa))
        row.error = max(relative_error(a, b) for a, b in zip(o_bwd(), s_bwd()))
        calls = [o_bwd, s_bwd]
    ms = [t * 1e3 for t in interleaved_medians(calls, reps, device)]
    row.kernel_ms, row.baselines_ms = ms[0], {"sdpa": ms[1]}
    row.kernel_rate = flops / (ms[0] / 1e3) / 1e12
    row.ok = row.error <= TOLERANCE[q.dtype] * (4 if row.direction == "bwd" else 1)
