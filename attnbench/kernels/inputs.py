"""Device tensors of a sweep point: q and the paged K/V cache, generated where they are used.

Gigabytes of KV cache made on the CPU and copied over take minutes; `torch.randn` on the device
takes milliseconds. Values are standard normal, never zeros (zeros hide unwritten outputs).
"""

from __future__ import annotations

from dataclasses import dataclass

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


def make_inputs(point: SweepPoint, device: torch.device | str) -> Inputs:
    batch = build_batch(point)
    device = torch.device(device)
    dtype = torch_dtype(point.dtype)
    gen = torch.Generator(device=device).manual_seed(point.seed)
    blocks = num_cache_blocks(batch, point.block_size)
    cache_shape = (blocks, point.block_size, point.num_kv_heads, point.head_dim)
    q = torch.randn((batch.num_tokens, point.num_heads, point.head_dim), generator=gen, device=device, dtype=dtype)
    k_cache = torch.randn(cache_shape, generator=gen, device=device, dtype=dtype)
    v_cache = torch.randn(cache_shape, generator=gen, device=device, dtype=dtype)
    return Inputs(point, batch, q, k_cache, v_cache, build_block_table(batch, point.block_size, point.seed))
