"""One layer's paged attention through an attnbench backend: write the new K/V, run the bound plan.

Why it exists: the model hands each layer's (q, k, v) to a callable, and this is the callable
the engine gives it. The engine plans the strategy once per step (once per bucket for a CUDA
graph) with `plan(metadata)` and binds it with `bind(plan, slot_mapping)`; every layer of the
step then writes its k and v into its pages at `slot_mapping` and runs that same plan. Nothing
here builds metadata, plans or reads back to the host, so a decode step can be captured.
"""

from __future__ import annotations

import torch

from attnbench.e2e.elementwise import triton_kernels
from attnbench.errors import UsageError
from attnbench.kernels.backends.base import Backend, Plan
from attnbench.kernels.metadata import SplitMetadata, VarlenMetadata
from attnbench.kernels.workload import SweepPoint


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """Store the new tokens' K/V at their slots (slot = block id * block_size + offset)."""
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slot_mapping, k)
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slot_mapping, v)


KV_WRITES = ("torch", "triton")  # two index_copy_ launches (K, then V), or fused_ops.write_kv's one


def kv_writer(kv_write: str, device: torch.device | str):
    """The write_kv a PagedAttention runs: "torch" anywhere, "triton" (one launch) on CUDA only."""
    if kv_write not in KV_WRITES:
        raise UsageError(f"kv_write: unknown {kv_write!r}; choose from {', '.join(KV_WRITES)}")
    if kv_write == "torch":
        return write_kv
    return triton_kernels("kv_write triton", device).write_kv


class PagedAttention:
    """The `attn(layer_id, q, k, v)` callable of one engine: a backend, a strategy, a KV cache, and
    how each layer's new K/V reach the cache (kv_write: one of KV_WRITES)."""

    def __init__(self, backend: Backend, strategy: str, point: SweepPoint,
                 k_cache: torch.Tensor, v_cache: torch.Tensor, kv_write: str = "torch"):
        # point carries what a plan reads from it: head shape, dtype, block size, causal, scale
        self.backend, self.strategy, self.point = backend, strategy, point
        self.kv_write, self.write_kv = kv_write, kv_writer(kv_write, k_cache.device)
        self.k_cache, self.v_cache = k_cache, v_cache  # [layers, blocks, block_size, kv_heads, dim]
        self.layers = list(zip(k_cache.unbind(0), v_cache.unbind(0)))  # per-layer views, made once
        self.bound: Plan | None = None
        self.slot_mapping: torch.Tensor | None = None

    def plan(self, metadata: VarlenMetadata | SplitMetadata) -> Plan:
        return self.backend.plan(self.strategy, self.point, metadata)

    def bind(self, plan: Plan, slot_mapping: torch.Tensor) -> None:
        self.bound, self.slot_mapping = plan, slot_mapping

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 out: torch.Tensor | None = None) -> torch.Tensor:
        """out: where the output goes (piecewise graphs pass their static buffer's rows); new when None."""
        k_cache, v_cache = self.layers[layer]
        self.write_kv(k_cache, v_cache, k, v, self.slot_mapping)
        return self.bound.run(q, k_cache, v_cache, torch.empty_like(q) if out is None else out)
