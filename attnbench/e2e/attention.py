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
from attnbench.e2e.model import rope_qk
from attnbench.errors import UsageError
from attnbench.kernels.backends.base import Backend, Plan
from attnbench.kernels.metadata import SplitMetadata, VarlenMetadata
from attnbench.kernels.workload import SweepPoint


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """Store the new tokens' K/V at their slots (slot = block id * block_size + offset)."""
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slot_mapping, k)
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slot_mapping, v)


def rope_write_kv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> torch.Tensor:
    """RoPE on the new tokens' q and k, then their K/V stored (the model's rope_qk, then write_kv):
    what a layer does before attention when the attention call takes RoPE over. Returns q turned."""
    q, k = rope_qk(q, k, cos, sin)
    write_kv(k_cache, v_cache, k, v, slot_mapping)
    return q


# How a layer's new K/V reach the cache: two index_copy_ launches (K, then V), fused_ops.write_kv's
# one; or, with "-rope", the attention call also takes over the layer's RoPE: torch-rope the model's
# rope_qk and the two copies (the plain form of the next), triton-rope fused_ops.rope_write_kv's one
# launch for RoPE and both writes
KV_WRITES = ("torch", "triton", "torch-rope", "triton-rope")


def kv_writer(kv_write: str, device: torch.device | str):
    """The write a PagedAttention runs: write_kv(k_cache, v_cache, k, v, slots), or for a "-rope"
    choice rope_write_kv(q, k, v, cos, sin, k_cache, v_cache, slots) -> q. "torch" and "torch-rope"
    run anywhere, the Triton ones on CUDA only."""
    if kv_write not in KV_WRITES:
        raise UsageError(f"kv_write: unknown {kv_write!r}; choose from {', '.join(KV_WRITES)}")
    if kv_write == "torch":
        return write_kv
    if kv_write == "torch-rope":
        return rope_write_kv
    ops = triton_kernels(f"kv_write {kv_write}", device)
    return ops.rope_write_kv if kv_write == "triton-rope" else ops.write_kv


class PagedAttention:
    """The `attn(layer_id, q, k, v)` callable of one engine: a backend, a strategy, a KV cache, and
    how each layer's new K/V reach the cache (kv_write: one of KV_WRITES). With a "-rope" write it
    `applies_rope`: the model hands it q and k unturned with `rope=(cos, sin)` (model.Block.forward)."""

    def __init__(self, backend: Backend, strategy: str, point: SweepPoint,
                 k_cache: torch.Tensor, v_cache: torch.Tensor, kv_write: str = "torch"):
        # point carries what a plan reads from it: head shape, dtype, block size, causal, scale
        self.backend, self.strategy, self.point = backend, strategy, point
        self.kv_write, self.write_kv = kv_write, kv_writer(kv_write, k_cache.device)
        self.applies_rope = kv_write.endswith("-rope")
        self.k_cache, self.v_cache = k_cache, v_cache  # [layers, blocks, block_size, kv_heads, dim]
        self.layers = list(zip(k_cache.unbind(0), v_cache.unbind(0)))  # per-layer views, made once
        self.bound: Plan | None = None
        self.slot_mapping: torch.Tensor | None = None

    def plan(self, metadata: VarlenMetadata | SplitMetadata) -> Plan:
        return self.backend.plan(self.strategy, self.point, metadata)

    def bind(self, plan: Plan, slot_mapping: torch.Tensor) -> None:
        self.bound, self.slot_mapping = plan, slot_mapping

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 out: torch.Tensor | None = None,
                 rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """out: where the output goes (piecewise graphs pass their static buffer's rows); new when
        None. rope: the tokens' (cos, sin), given exactly when this call applies_rope."""
        if (rope is not None) != self.applies_rope:
            raise ValueError(f"kv_write {self.kv_write}: RoPE's cos/sin must come {'with' if self.applies_rope else 'without'}"
                             " the call (the model turns q and k unless the attention call applies_rope)")
        k_cache, v_cache = self.layers[layer]
        if rope is None:
            self.write_kv(k_cache, v_cache, k, v, self.slot_mapping)
        else:
            q = self.write_kv(q, k, v, *rope, k_cache, v_cache, self.slot_mapping)
        return self.bound.run(q, k_cache, v_cache, torch.empty_like(q) if out is None else out)
