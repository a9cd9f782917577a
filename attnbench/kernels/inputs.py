"""Device tensors of a sweep point: q and the paged K/V cache, generated where they are used.

Gigabytes of KV cache made on the CPU and copied over take minutes; `torch.randn` on the device
takes milliseconds. Values are standard normal, never zeros (zeros hide unwritten outputs).
What those tensors cost is here too (`device_bytes`, `host_bytes`, HEADROOM, `free_bytes`), so a
point that cannot fit is refused before anything is allocated, on the CPU as on a GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from attnbench.kernels.metadata import build_block_table, num_cache_blocks
from attnbench.kernels.workload import Batch, SweepPoint, build_batch


@dataclass
class Inputs:
    """A sweep point's batch on the device: what its plans run on and the reference checks."""

    point: SweepPoint
    batch: Batch
    q: torch.Tensor  # [num_tokens, num_heads, head_dim]
    k_cache: torch.Tensor  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor
    block_table: torch.Tensor  # int32 on the host; strategies slice and copy it

    @property
    def device(self) -> torch.device:
        return self.q.device


def torch_dtype(name: str) -> torch.dtype:
    return {"bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def input_bytes(point: SweepPoint, batch: Batch | None = None) -> int:
    """Bytes q, out and the KV cache take on the device (for the fits-in-memory check)."""
    batch = batch or build_batch(point)
    elt = torch.empty((), dtype=torch_dtype(point.dtype)).element_size()
    kv = 2 * num_cache_blocks(batch, point.block_size) * point.block_size * point.num_kv_heads * point.head_dim
    q_and_out = 2 * batch.num_tokens * point.num_heads * point.head_dim
    return (kv + q_and_out) * elt


HEADROOM = 1.2  # a point may take 20 % over the tensors counted: torch's own allocations, fragmentation


def device_bytes(point: SweepPoint, batch: Batch | None = None) -> int:
    """Bytes a point takes on the GPU: its inputs, the float32 reference output and the outputs of
    two strategies (8 bytes an output element in all)."""
    batch = batch or build_batch(point)
    return input_bytes(point, batch) + batch.num_tokens * point.num_heads * point.head_dim * 8


def host_bytes(point: SweepPoint, batch: Batch | None = None) -> int:
    """Peak bytes of a point measured on the CPU: its inputs, the float32 reference output and
    one output per strategy, plus the reference's largest per-sequence working set (the
    sequence's K and V gathered and cast to float32, and its float32 scores, mask and probs)."""
    batch = batch or build_batch(point)
    elt = torch.empty((), dtype=torch_dtype(point.dtype)).element_size()
    outputs = batch.num_tokens * point.num_heads * point.head_dim * (4 + 2 * elt)
    per_seq = max(2 * kv * point.num_kv_heads * point.head_dim * (elt + 4) + 17 * point.num_heads * q * kv
                  for q, kv in zip(batch.query_lens, batch.kv_lens))
    return input_bytes(point, batch) + outputs + per_seq


def available_host_bytes() -> int | None:
    """Memory this process can still take: MemAvailable (Linux), capped by a cgroup v2 limit
    (containers); else the physical memory; None when the system says neither."""
    found = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            found.append(int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text()))
    except (OSError, ValueError):
        pass
    if not found:
        try:
            found.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (AttributeError, ValueError, OSError):
            return None
    return max(0, min(found))


def free_bytes(device: torch.device) -> int | None:
    """What a point may take where it runs: free GPU memory, or the memory the machine has
    available (None: unknown)."""
    return torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else available_host_bytes()


def cache_elements(point: SweepPoint, batch: Batch | None = None) -> int:
    """Elements of the paged K cache a point's inputs hold (pages x page size x KV heads x head dim)."""
    blocks = num_cache_blocks(batch or build_batch(point), point.block_size)
    return blocks * point.block_size * point.num_kv_heads * point.head_dim


def make_inputs(point: SweepPoint, device: torch.device | str, batch: Batch | None = None,
                seed: int | None = None) -> Inputs:
    """The point's batch (or `batch`, one verify checks) on `device`, drawn from `seed` (the point's)."""
    batch = batch or build_batch(point)
    seed = point.seed if seed is None else seed
    device = torch.device(device)
    dtype = torch_dtype(point.dtype)
    gen = torch.Generator(device=device).manual_seed(seed)
    blocks = num_cache_blocks(batch, point.block_size)
    cache_shape = (blocks, point.block_size, point.num_kv_heads, point.head_dim)
    q = torch.randn((batch.num_tokens, point.num_heads, point.head_dim), generator=gen, device=device, dtype=dtype)
    k_cache = torch.randn(cache_shape, generator=gen, device=device, dtype=dtype)
    v_cache = torch.randn(cache_shape, generator=gen, device=device, dtype=dtype)
    return Inputs(point, batch, q, k_cache, v_cache, build_block_table(batch, point.block_size, seed))
