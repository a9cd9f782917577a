"""How much device memory a set of CUDA graphs holds: the segments of their private memory pool.

Why not the change in `torch.cuda.memory_reserved` around a capture: `torch.cuda.graph` empties the
allocator's cache on entry, and tensors freed between the two readings (the previous step's
activations) are released with it, so the difference can be negative (-18 MB for a tiny model's
full graphs on the H200). The allocator's snapshot names the pool that owns each segment; the
graphs' pool is what they keep for as long as they live. Static input and output buffers live in
the default pool and are not counted."""

from __future__ import annotations

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
