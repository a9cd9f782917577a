"""The batch-1 decode step's parts, each timed alone on the GPU, for benchmarks/e2e_floor.py: the
copy bandwidth the floor divides by, the projections (all of them, and each shape apart) issued
several ways, and one step's RoPE and K/V writes by each of attention.KV_WRITES. Every timing is a CUDA
graph replayed back to back (CUDA events), so host work is never in it. Not a test, not a script.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from attnbench.e2e.attention import kv_writer
from attnbench.e2e.elementwise import graph_us
from attnbench.e2e.model import ModelArgs, rope_qk


def linear(w, x):
    return torch.nn.functional.linear(x, w)


def mv(w, x):
    return torch.mv(w, x[0])


def triton_gemv(w, x):
    from attnbench.e2e.fused_ops import gemv  # imports triton

    return gemv(x, w)


def triton_config(n_out: int, k_in: int) -> str:
    try:
        from attnbench.e2e.fused_ops import gemv_config
    except ImportError as exc:
        return f"triton does not import ({exc})"
    return gemv_config(n_out, k_in)


# (name, preferred BLAS library or None, call): F.linear as the model issues it (cuBLAS picks its
# kernel, split-K for some shapes), F.linear with cuBLASLt preferred, torch.mv (cuBLAS GEMV on the
# weight as stored), and fused_ops.gemv (one Triton launch a projection, no split-K, autotuned)
WAYS = (("linear", "cublas", linear), ("linear_cublaslt", "cublaslt", linear), ("mv", "cublas", mv),
        ("triton_gemv", None, triton_gemv))


@contextmanager
def blas_library(name: str | None):
    """torch's preferred BLAS library set to name within the block (None: left as it is)."""
    previous = torch.backends.cuda.preferred_blas_library()
    if name is not None:
        torch.backends.cuda.preferred_blas_library(name)
    try:
        yield
    finally:
        torch.backends.cuda.preferred_blas_library(previous)


def copy_bandwidth_gbs(device: torch.device, gib: float = 2.0, reps: int = 20) -> float:
    src = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    return 2 * src.numel() / (replay_ms(lambda: dst.copy_(src), reps) / 1e3) / 1e9


def graph_ms(calls, reps: int = 20) -> float:
    """calls() captured in one CUDA graph (run first outside the capture, so kernels load and
    compile there), then replayed back to back: milliseconds per replay (CUDA events;
    elementwise.graph_us, which the model's "auto" projection times with)."""
    return graph_us(calls, reps) / 1e3


def replay_ms(replay, reps: int) -> float:
    """Milliseconds per call of replay, called reps times back to back with no host work between."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def projections_alone(model, floor_ms: float, reps: int = 20) -> dict:
    """The decode step's weight reads without the rest of the step: every layer's four projections
    and the LM head on one token, in one CUDA graph, replayed back to back (CUDA events), each of
    WAYS. Their time is what the step cannot beat with that way of issuing them; the step's time
    above it is the norms, RoPE, KV writes, attention and the gaps between kernels."""
    weights = [w for layer in model.layers for w in (layer.attention.wqkv, layer.attention.wo,
                                                      layer.feed_forward.w13, layer.feed_forward.w2)]
    weights.append(model.output)
    xs = [torch.randn(1, w.shape[1], dtype=w.dtype, device=w.device) for w in weights]
    outs = {}
    for name, blas, run in WAYS:
        try:  # the first, uncaptured call: cuBLAS picks and Triton tunes its kernels outside the capture
            with blas_library(blas):
                ms = graph_ms(lambda: [run(w, x) for w, x in zip(weights, xs)], reps)
            outs[f"gemv_{name}_ms"], outs[f"gemv_{name}_floor_ratio"] = ms, ms / floor_ms
        except (RuntimeError, ImportError) as exc:  # one way failing leaves the others measured
            outs[f"gemv_{name}_ms"] = f"failed: {str(exc).splitlines()[0][:120]}"
    return outs


def gemv_per_shape(model, reps: int = 20) -> dict:
    """Each projection shape of the decode step alone, each of WAYS: all layers' weights of that
    shape (the LM head ten times: it alone is larger than L2) called on one token in one CUDA graph,
    so no call finds its weights in L2 as a repeat of one matrix would. Microseconds per call, the
    weight-read bandwidth it reaches (GB/s) and, for Triton, the blocks the autotuner chose: where
    split-K (what cuBLAS picks for some shapes) or a plain one-pass GEMV is faster, per shape."""
    shapes = {"wqkv": [l.attention.wqkv for l in model.layers], "wo": [l.attention.wo for l in model.layers],
              "w13": [l.feed_forward.w13 for l in model.layers], "w2": [l.feed_forward.w2 for l in model.layers],
              "lm_head": [model.output] * 10}
    outs = {}
    for shape, weights in shapes.items():
        x = torch.randn(1, weights[0].shape[1], dtype=weights[0].dtype, device=weights[0].device)
        outs[f"{shape}_shape"] = "x".join(map(str, weights[0].shape))
        for name, blas, run in WAYS:
            try:
                with blas_library(blas):
                    us = graph_ms(lambda: [run(w, x) for w in weights], reps) * 1e3 / len(weights)
                outs[f"{shape}_{name}_us"], outs[f"{shape}_{name}_gbs"] = us, weights[0].nbytes / us / 1e3
            except (RuntimeError, ImportError) as exc:
                outs[f"{shape}_{name}_us"] = f"failed: {str(exc).splitlines()[0][:120]}"
        outs[f"{shape}_triton_config"] = triton_config(*weights[0].shape)
    return outs


def kv_write_alone(margs: ModelArgs, kv_writes: list[str], device: torch.device, tokens=(1, 16, 256, 2048),
                   reps: int = 20) -> dict:
    """What a step does between each layer's qkv GEMM and its attention kernel, by each K/V write:
    RoPE on q and k and the K/V stores (the model's rope_qk, then the write; or a "-rope" write that
    does both). n_layer of them, each into its own layer's cache, q, k and v strided views of a qkv
    output as the model hands them over, in one CUDA graph per choice, replayed back to back:
    microseconds per step, and how every choice's q and caches agree with the first's (agreement)."""
    outs = {}
    kv_size, q_size = margs.n_kv_head * margs.head_dim, margs.n_head * margs.head_dim
    for n in tokens:
        qkv = torch.randn(n, q_size + 2 * kv_size, dtype=torch.bfloat16, device=device)
        q, k, v = (t.view(n, -1, margs.head_dim) for t in qkv.split([q_size, kv_size, kv_size], dim=-1))
        angles = torch.rand(n, margs.head_dim // 2, device=device) * 1000
        cos, sin = angles.cos(), angles.sin()
        blocks = -(-n // 16) + 1
        slots = torch.randperm(blocks * 16, device=device)[:n]
        results = {}
        for kv_write in kv_writes:
            write = kv_writer(kv_write, device)
            cache = torch.zeros(2, margs.n_layer, blocks, 16, margs.n_kv_head, margs.head_dim,
                                dtype=torch.bfloat16, device=device)
            turned = []

            def layer_step(layer: int):
                if kv_write.endswith("-rope"):
                    return write(q, k, v, cos, sin, cache[0, layer], cache[1, layer], slots)
                q_turned, k_turned = rope_qk(q, k, cos, sin)
                write(cache[0, layer], cache[1, layer], k_turned, v, slots)
                return q_turned
            ms = graph_ms(lambda: turned.append([layer_step(layer) for layer in range(margs.n_layer)]), reps)
            outs[f"kv_write_{kv_write}_{n}tok_us"] = ms * 1e3
            results[kv_write] = (turned[-1][-1], cache)
        first_q, first_cache = results[kv_writes[0]]
        outs[f"kv_write_{n}tok_agreement"] = "; ".join(
            f"{kv_write}: {agreement(q_, cache, first_q, first_cache)}" for kv_write, (q_, cache) in results.items()
            if kv_write != kv_writes[0])
    return outs


def agreement(q: torch.Tensor, cache: torch.Tensor, first_q: torch.Tensor, first_cache: torch.Tensor) -> str:
    """A write's q and caches against the first write's: the same bytes; or, where RoPE ran in another
    kernel (whose multiply-adds may round in another order), V the same bytes and q and K within
    one bf16 rounding; or how far apart."""
    if torch.equal(q, first_q) and torch.equal(cache, first_cache):
        return "same bytes"
    worst = max(((got.float() - want.float()).abs() - 2.0 ** -7 * want.float().abs()).max().item()
                for got, want in ((q, first_q), (cache[0], first_cache[0])))
    if torch.equal(cache[1], first_cache[1]) and worst <= 1e-6:
        return "V same bytes, q and K within one bf16 rounding"
    return f"differs (V same bytes: {torch.equal(cache[1], first_cache[1])}; worst excess over one rounding {worst:.3g})"
