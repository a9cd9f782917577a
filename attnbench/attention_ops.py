"""One layer's paged attention through an attnbench backend: write the new K/V, run the kernel(s).

Why it exists: the model hands each layer's (q, k, v) to a callable, and this is the callable
the engine gives it. It writes k and v into the layer's pages at `slot_mapping`, then runs the
backend's strategy through the backend's own `prepare` (unified: one varlen call; split:
kvcache for the decode rows + varlen for the rest) on metadata the engine bound beforehand:
fresh tensors in an eager step, the persistent buffers of a CUDA graph in a decode step. It
builds no metadata and reads nothing back to the host, so a decode step can be captured.
"""

from __future__ import annotations

import torch

from attnbench.backends import Backend
from attnbench.inputs import Inputs
from attnbench.metadata import SplitMetadata, VarlenMetadata
from attnbench.workload import SweepPoint


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """Store the new tokens' K/V at their slots (slot = block id * block_size + offset)."""
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slot_mapping, k)
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slot_mapping, v)


class PagedAttention:
    """The `attn(layer_id, q, k, v)` callable of one engine: a backend, a strategy, a KV cache."""

    def __init__(self, backend: Backend, strategy: str, point: SweepPoint,
                 k_cache: torch.Tensor, v_cache: torch.Tensor):
        # point carries what the backend reads from it: head shape, dtype, causal, softmax scale
        self.backend, self.strategy, self.point = backend, strategy, point
        self.k_cache, self.v_cache = k_cache, v_cache  # [layers, blocks, block_size, kv_heads, dim]
        self.metadata: VarlenMetadata | SplitMetadata | None = None
        self.slot_mapping: torch.Tensor | None = None

    def bind(self, metadata: VarlenMetadata | SplitMetadata, slot_mapping: torch.Tensor) -> None:
        self.metadata, self.slot_mapping = metadata, slot_mapping

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k_cache, v_cache = self.k_cache[layer], self.v_cache[layer]
        write_kv(k_cache, v_cache, k, v, self.slot_mapping)
        out = torch.empty_like(q)
        inputs = Inputs(self.point, None, q, k_cache, v_cache, None)
        return self.backend.prepare(self.strategy, inputs, self.metadata, out)()
