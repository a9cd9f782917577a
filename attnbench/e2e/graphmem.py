"""Capturing the e2e engine's CUDA graphs (decode, full and piecewise) into one pool per engine,
and how much device memory they hold: the segments of that private memory pool.

Why not the change in `torch.cuda.memory_reserved` around a capture: `torch.cuda.graph` empties the
allocator's cache on entry, and tensors freed between the two readings (the previous step's
activations) are released with it, so the difference can be negative (-18 MB for a tiny model's
full graphs on the H200). The allocator's snapshot names the pool that owns each segment; the
graphs' pool is what they keep for as long as they live. Static input and output buffers live in
the default pool and are not counted."""

from __future__ import annotations

from typing import Callable

import torch


def pool_bytes(pool, device: torch.device | str) -> int:
    """Bytes of the segments `pool` (a CUDAGraph.pool() handle; None before any capture) owns on
    `device`."""
    if pool is None:
        return 0
    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    want = tuple(pool)
    segments = torch.cuda.memory._snapshot()["segments"]
    return sum(int(s["total_size"]) for s in segments
               if s.get("device", index) == index and tuple(s.get("segment_pool_id", ())) == want)


def capture(fn: Callable[[], object], pool) -> tuple[torch.cuda.CUDAGraph, object]:
    """fn() captured into a new graph in `pool` (None: a new pool); the graph and the pool to pass to
    the next capture. Under a tensor-parallel process group the NCCL watchdog thread queries events
    while this thread captures; "thread_local" keeps its queries from invalidating the capture
    (pytorch#104555)."""
    mode = "thread_local" if torch.distributed.is_initialized() else "global"
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool, capture_error_mode=mode):
        fn()
    return graph, pool or graph.pool()
