"""Decode CUDA graphs for the e2e engine: decode steps replayed from graphs, one per batch bucket.

Why: a decode step is small and host-bound when launched eagerly; nano-vllm replays it from a
graph captured per batch-size bucket (modes.graph_buckets), and so does this. The graphs are
captured when the engine is made, largest bucket first, in one memory pool, on static buffers
sized for max_num_seqs. Each bucket's metadata is built and planned once, for a decode batch at
the engine's max_model_len (a static max_seqlen_k that bounds every batch the graph replays);
its tensors are the buffers the live batch is copied into. Padding rows are harmless: they
attend to zero keys (seqused_k / cache_seqlens = 0) and write their K/V into a scratch block no
block table names. Prefill and mixed steps are not replayed here: a graph captured on a decode
batch froze max_seqlen_q = 1 and is not valid for them (they run eagerly under `decode`, and
piecewise under `full` on a backend whose graphs replay on decode batches only: modes.py).
"""

from __future__ import annotations

import math
import time
from typing import Callable

import torch

from attnbench.e2e.graphmem import CapturedGraphs, GraphEngine
from attnbench.e2e.modes import graph_buckets
from attnbench.e2e.scheduler import Step
from attnbench.kernels.backends.base import Plan
from attnbench.kernels.metadata import SplitMetadata, VarlenMetadata, build_metadata
from attnbench.kernels.workload import Batch


class DecodeGraphs(CapturedGraphs):
    """One engine's decode graphs, by batch bucket, captured when they are made (a CUDA device only)."""

    @torch.inference_mode()  # buffers, metadata and plans as the engine's steps make theirs
    def __init__(self, engine: GraphEngine):
        super().__init__(engine)  # refuses without CUDA
        n, long = engine.max_num_seqs, dict(dtype=torch.long, device=engine.device)
        self.buckets = graph_buckets(n)
        self.input_ids, self.positions = torch.zeros(n, **long), torch.zeros(n, **long)
        self.slot_mapping = torch.full((n,), engine.cache.scratch_slot, **long)
        self.logits = torch.empty((n, engine.model.args.vocab_size), dtype=engine.model.tok_embeddings.dtype,
                                  device=engine.device)
        self.metadata = {b: self._static_metadata(b) for b in self.buckets}
        self.plans: dict[int, Plan] = {}  # kept alive with their graphs
        self.replays: dict[int, Callable[[], object]] = {}
        self._capture()

    @property
    def num_graphs(self) -> int:
        return len(self.replays)

    def capture_every(self, max_tokens: int) -> None:
        """Nothing left: every batch bucket is captured when the graphs are made."""

    def _static_metadata(self, bucket: int) -> VarlenMetadata | SplitMetadata:
        """The strategy's metadata for a decode batch at max_model_len: its tensors become buffers."""
        e = self.engine
        blocks = math.ceil(e.max_model_len / e.cache.block_size)
        batch = Batch((1,) * bucket, (e.max_model_len,) * bucket, (True,) * bucket)
        table = torch.zeros((bucket, blocks), dtype=torch.int32)
        return build_metadata(e.attn.strategy, batch, table).to(e.device)

    @staticmethod
    def _kv_buffers(md: VarlenMetadata | SplitMetadata) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(md, VarlenMetadata):
            return md.seqused_k, md.block_table
        return md.decode.cache_seqlens, md.decode.block_table

    def _capture(self) -> None:
        start, forwards = time.perf_counter(), []
        for bucket in reversed(self.buckets):
            md = self.metadata[bucket]
            self._kv_buffers(md)[0].zero_()  # capture on padding rows only: nothing read or kept
            self.plans[bucket] = self.engine.attn.plan(md)  # planned once, outside the capture
            forwards.append(self._forward(bucket, self.plans[bucket]))
        self.replays = dict(zip(reversed(self.buckets), self.capture_all(forwards)))
        self.capture_s += time.perf_counter() - start

    def _forward(self, bucket: int, plan: Plan) -> Callable[[], None]:
        """One decode bucket's step on the static buffers, its plan bound (host only) first."""
        e, slots = self.engine, self.slot_mapping[:bucket]
        args = (self.input_ids[:bucket], self.positions[:bucket], e.attn)

        def forward() -> None:
            e.attn.bind(plan, slots)  # the capture batch's rows are all padding: K/V go to the scratch slot
            self.logits[:bucket] = e.model(*args)
        return forward

    def load(self, step: Step) -> Callable[[], torch.Tensor]:
        """A decode step's inputs into its bucket's buffers, padding rows after the real ones."""
        e, n = self.engine, len(step.rows)
        bucket = next(b for b in self.buckets if b >= n)
        pad = bucket - n
        kv_lens, table = self._kv_buffers(self.metadata[bucket])
        e.copy_in(self.input_ids[:bucket], step.input_ids + [0] * pad)
        e.copy_in(self.positions[:bucket], step.positions + [0] * pad)
        e.copy_in(self.slot_mapping[:bucket], step.slot_mapping + [e.cache.scratch_slot] * pad)
        e.copy_in(kv_lens, list(step.batch.kv_lens) + [0] * pad)
        table[:n, :step.block_table.shape[1]].copy_(step.block_table.pin_memory(), non_blocking=True)
        refresh = self.plans[bucket].refresh
        if refresh is not None:  # the library re-plans this batch into the buffers the graph reads
            host_table = torch.zeros(tuple(table.shape), dtype=torch.int32)
            host_table[:n, :step.block_table.shape[1]] = step.block_table
            padded = Batch((1,) * bucket, tuple(step.batch.kv_lens) + (0,) * pad, (True,) * bucket)
            refresh(build_metadata(e.attn.strategy, padded, host_table))
        graph, logits = self.replays[bucket], self.logits[:n]

        def replay() -> torch.Tensor:
            graph()
            return logits
        return replay
