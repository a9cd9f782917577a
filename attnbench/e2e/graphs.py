"""Full CUDA graphs for the e2e engine: every step kind (prefill, mixed, decode) replayed from a graph.

Why: with decode-only graphs (`--cudagraph decode`) prefill and chunked-prefill mixed steps run
eagerly and are host-bound, which hides the kernel-level difference between unified and split on
exactly the batches where they differ most (issue 11). vLLM V1 replays mixed batches from graphs
bucketed by token count; this is that mode, built on the graph-safety recipe of
attnbench/kernels/graphsafe.py (the same pure functions `attnbench verify` checks).

Buckets. A step's bucket is a graphsafe.Bucket: unified counts tokens and sequences (both rounded
up: tokens to a power of two or the engine's largest step, sequences to nano-vllm's batch buckets),
and a decode-only step has buckets of its own at max_seqlen_q 1 (as vLLM's uniform-decode graphs;
with the token bucket's max_seqlen_q, FA2 leaves its grouped-query decode path and its decode
steps are slower: docs/measurements/h200/e2e.md);
split buckets its decode part (decode sequences) and its prefill part (prefill tokens, prefill
sequences) separately, as its two launches need, a part absent from the step being absent from
the bucket. The static q rows are graphsafe's: split's decode rows first (the decode bucket's
size), then the prefill part's rows.

A graph is captured the first time a step needs its bucket (lazily), in one memory pool shared by
the engine's graphs, or up front (`capture_every`: every bucket a step within the limits can
reach, for a served trace, whose schedule follows the wall clock and differs between serves).
The runner's first run of a row is its untimed check run, and the measured runs repeat its
schedule, so captures happen there; the engine also subtracts any capture's time
from the step's host time. Per engine: how many graphs, and the device memory their private pool
holds (graphmem.py), in the row as `graphs` and `graph_mem_mb`.

Policies (graphsafe.POLICIES). `safe`: the plan is made on the bucket's upper bounds
(max_seqlen_q = the bucket's tokens, max_seqlen_k = every key a block-table row reaches),
cu_seqlens_q padded non-decreasing, padding sequences with no keys and the scratch block, padding
tokens writing K/V to the cache's scratch slot. `naive`: the plan is made on the batch that
first needed the bucket, later batches copied in as they come: the seed's bug, for
`--graph-policy naive`; the agreement check is expected to call it MISMATCH.

A backend whose `graph_replay` is "decode-only" (FlashInfer) replays no graph of this module:
under `full` its decode steps replay decode graphs (decode_graphs.py) and its prefill and mixed
steps run piecewise (piecewise.py), and its rows' graph_note says so (modes.choose_graphs).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import torch

from attnbench.e2e.graphmem import CapturedGraphs, GraphEngine
from attnbench.e2e.modes import GraphMode, cudagraph_of, graph_buckets
from attnbench.e2e.scheduler import Step
from attnbench.errors import AttnbenchError, UsageError
from attnbench.kernels.backends.base import Plan
from attnbench.kernels.graphsafe import (POLICIES, Bucket, Buffers, Metadata, plan_metadata, real_rows,
                                         static_buffers, write_batch)
from attnbench.kernels.metadata import build_metadata
from attnbench.kernels.workload import Batch

def check_cudagraph(args) -> None:
    """--cudagraph / --eager / --graph-policy of runner.E2EArgs, each refusal one line."""
    if args.eager and args.cudagraph not in (None, GraphMode.NONE):
        raise UsageError(f"--eager is --cudagraph none: it cannot be combined with --cudagraph {args.cudagraph}")
    if args.graph_policy not in POLICIES:
        raise UsageError(f"--graph-policy: unknown policy {args.graph_policy!r}; choose from {', '.join(POLICIES)}")
    if args.graph_policy != "safe" and cudagraph_of(args) != GraphMode.FULL:
        raise UsageError(f"--graph-policy {args.graph_policy}: only with --cudagraph full (the other modes have one "
                         "recipe)")


def token_buckets(max_tokens: int) -> list[int]:
    """Powers of two below max_tokens, then max_tokens: a step pads at most to twice its tokens."""
    return [1 << i for i in range(max(max_tokens - 1, 0).bit_length()) if 1 << i < max_tokens] + [max_tokens]


def round_up(n: int, buckets: list[int]) -> int:
    """The smallest bucket that holds n (0 stays 0: a part the step lacks)."""
    if n == 0:
        return 0
    for b in buckets:
        if b >= n:
            return b
    raise AttnbenchError(f"{n} does not fit the largest graph bucket {buckets[-1]}")


def full_bucket(strategy: str, batch: Batch, seq_buckets: list[int], tok_buckets: list[int],
                max_blocks_per_seq: int, block_size: int) -> Bucket:
    """The bucket a step replays in. Split: decode and prefill parts rounded up separately. Unified:
    a step of single-token decodes only gets a bucket of its own at max_seqlen_q 1 (vLLM's
    uniform-decode batch descriptor), which keeps FA2 on its grouped-query decode path; any other
    step takes max_seqlen_q = its token bucket."""
    if strategy == "unified" and batch.num_decode_seqs == batch.num_seqs and set(batch.query_lens) == {1}:
        seqs = round_up(batch.num_seqs, seq_buckets)
        return Bucket(0, seqs, seqs, 1, max_blocks_per_seq, block_size)
    if strategy == "unified":
        tokens = round_up(batch.num_tokens, tok_buckets)
        return Bucket(0, round_up(batch.num_seqs, seq_buckets), tokens, tokens, max_blocks_per_seq, block_size)
    decode = batch.num_decode_seqs
    prefill_tokens = round_up(batch.num_tokens - sum(batch.query_lens[:decode]), tok_buckets)
    return Bucket(round_up(decode, seq_buckets), round_up(batch.num_seqs - decode, seq_buckets), prefill_tokens,
                  prefill_tokens, max_blocks_per_seq, block_size)


def fewest(bucket: int, buckets: list[int]) -> int:
    """The fewest real items that round up to `bucket` (0 for the empty part)."""
    below = [b for b in buckets if b < bucket]
    return 0 if bucket == 0 else (below[-1] + 1 if below else 1)


def reachable_buckets(strategy: str, seq_buckets: list[int], tok_buckets: list[int], max_num_seqs: int,
                      max_tokens: int, max_blocks_per_seq: int, block_size: int) -> list[Bucket]:
    """Every bucket full_bucket can give a step of at most max_num_seqs sequences and max_tokens
    tokens (a prefill row holds at least one token): what to capture before a timed serve."""
    seqs, toks = lambda b: fewest(b, seq_buckets), lambda b: fewest(b, tok_buckets)  # noqa: E731
    shape = (max_blocks_per_seq, block_size)
    if strategy == "unified":
        found = [Bucket(0, s, s, 1, *shape) for s in seq_buckets if seqs(s) <= min(max_num_seqs, max_tokens)]
        return found + [Bucket(0, s, t, t, *shape) for s in seq_buckets for t in tok_buckets
                        if seqs(s) <= max_num_seqs and t >= seqs(s) and max(toks(t), seqs(s)) <= max_tokens]
    parts = [0, *seq_buckets]
    found = []
    for d in parts:
        for p in parts:
            if (d, p) == (0, 0) or seqs(d) + seqs(p) > max_num_seqs:
                continue
            if p == 0:
                found += [Bucket(d, 0, 0, 0, *shape)] if seqs(d) <= max_tokens else []
                continue
            found += [Bucket(d, p, t, t, *shape) for t in tok_buckets
                      if t >= seqs(p) and seqs(d) + max(toks(t), seqs(p)) <= max_tokens]
    return found


@dataclass
class PaddedStep:
    """A step's per-token inputs at the bucket's static rows; padding rows are harmless."""

    input_ids: list[int]
    positions: list[int]
    slot_mapping: list[int]  # padding rows: the KV cache's scratch slot
    logits_indices: list[int]  # the sampled rows' static rows, padded to the bucket's sequences with 0


def pad_step(step: Step, buffers: Buffers, metadata: Metadata, scratch_slot: int) -> PaddedStep:
    """The step's rows at the static rows write_batch gave them; padding rows everywhere else."""
    rows = real_rows(buffers, metadata).tolist()
    n = buffers.num_rows
    ids, positions, slots = [0] * n, [0] * n, [scratch_slot] * n
    for i, r in enumerate(rows):
        ids[r], positions[r], slots[r] = step.input_ids[i], step.positions[i], step.slot_mapping[i]
    indices = [rows[i] for i in step.logits_indices]
    return PaddedStep(ids, positions, slots, indices + [0] * (buffers.bucket.max_seqs - len(indices)))


@dataclass
class _Graph:
    buffers: Buffers
    plan: Plan  # kept alive with its graph
    input_ids: torch.Tensor
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    logits_indices: torch.Tensor
    logits: torch.Tensor
    replay: Callable[[], None]


class FullGraphs(CapturedGraphs):
    """One engine's full-step graphs, by bucket. `emulate` (tests on the CPU, no CUDA graphs): a
    "replay" re-runs the forward on the static buffers with the plan made at capture, which models
    a replay for backends whose launches read the metadata tensors when they run."""

    def __init__(self, engine: GraphEngine, policy: str = "safe", emulate: bool = False):
        if policy not in POLICIES:
            raise AttnbenchError(f"unknown graph policy {policy!r}; choose from {', '.join(POLICIES)}")
        super().__init__(engine, emulate)
        self.policy = policy
        self.seq_buckets = graph_buckets(engine.max_num_seqs)
        self.tok_buckets = token_buckets(min(engine.token_budget, engine.max_num_seqs * engine.max_model_len))
        self.max_blocks = math.ceil(engine.max_model_len / engine.cache.block_size)
        self.graphs: dict[Bucket, _Graph] = {}

    @property
    def num_graphs(self) -> int:
        return len(self.graphs)

    def bucket(self, step: Step) -> Bucket:
        return full_bucket(self.engine.attn.strategy, step.batch, self.seq_buckets, self.tok_buckets,
                           self.max_blocks, self.engine.cache.block_size)

    def capture_every(self, max_tokens: int) -> None:
        """Every bucket a step of at most max_tokens tokens can need, captured now (the safe policy's
        plans are made on the bucket's bounds, so no batch is needed)."""
        if self.policy != "safe":
            raise AttnbenchError(f"graph policy {self.policy}: buckets are captured on the batch that first needs them")
        e = self.engine
        for bucket in reachable_buckets(e.attn.strategy, self.seq_buckets, self.tok_buckets, e.max_num_seqs,
                                        max_tokens, self.max_blocks, e.cache.block_size):
            if bucket not in self.graphs:
                self._capture(bucket, None)

    def load(self, step: Step) -> Callable[[], torch.Tensor]:
        e = self.engine
        metadata = build_metadata(e.attn.strategy, step.batch, step.block_table)
        bucket = self.bucket(step)
        g = self.graphs.get(bucket) or self._capture(bucket, metadata)
        written = write_batch(g.buffers, metadata, self.policy)
        if g.plan.refresh is not None:  # the library re-plans this batch into the buffers the graph reads
            g.plan.refresh(written)
        padded = pad_step(step, g.buffers, metadata, e.cache.scratch_slot)
        for buffer, values in ((g.input_ids, padded.input_ids), (g.positions, padded.positions),
                               (g.slot_mapping, padded.slot_mapping), (g.logits_indices, padded.logits_indices)):
            e.copy_in(buffer, values)
        logits = g.logits[:len(step.logits_indices)]

        def replay() -> torch.Tensor:
            g.replay()
            return logits
        return replay

    @torch.inference_mode()
    def _capture(self, bucket: Bucket, metadata: Metadata | None) -> _Graph:
        e, start = self.engine, time.perf_counter()
        buffers = static_buffers(e.attn.strategy, bucket, e.cache.scratch_slot // e.cache.block_size, e.device)
        if self.policy == "naive":  # the capture batch's metadata, as it comes
            write_batch(buffers, metadata, "naive")
        plan = e.attn.plan(plan_metadata(buffers, metadata, self.policy))  # planned once, outside the capture
        long = dict(dtype=torch.long, device=e.device)
        n, seqs = buffers.num_rows, bucket.max_seqs
        ids, pos = torch.zeros(n, **long), torch.zeros(n, **long)
        slots, indices = torch.full((n,), e.cache.scratch_slot, **long), torch.zeros(seqs, **long)
        logits = torch.empty((seqs, e.model.args.vocab_size), dtype=e.model.tok_embeddings.dtype, device=e.device)

        def forward() -> None:
            e.attn.bind(plan, slots)  # host only; the capture batch's rows are all padding: K/V to the scratch slot
            logits.copy_(e.model(ids, pos, e.attn, indices))

        replay, = self.capture_all([forward])
        self.graphs[bucket] = _Graph(buffers, plan, ids, pos, slots, indices, logits, replay)
        self.capture_s += time.perf_counter() - start
        return self.graphs[bucket]
