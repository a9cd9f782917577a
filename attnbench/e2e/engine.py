"""The e2e engine: prefill/decode steps over a paged KV cache, and decode CUDA graphs.

nano-vllm's shape. `schedule` (scheduler.py) picks rows; `prepare` turns them into plain lists
and a host block table; `load` moves them to the device once, building the strategy's metadata
with attnbench's own builders, plans the backend's strategy once for the step and binds that plan
for every layer; the launch it returns only computes. Per step: host time before the launch
(schedule + prepare + load, planning included), host time to issue the launch, and device time
(launch + greedy sampling, by CUDA events).

Decode steps replay CUDA graphs, one per batch-size bucket, captured largest first in one memory
pool on static buffers. Each bucket's metadata is built and planned once, for a decode batch at
the engine's max_model_len (the static max_seqlen_k of KERNELS.md's recipe); its tensors are the
buffers the live batch is copied into. Padding rows are harmless: they attend to zero keys
(seqused_k / cache_seqlens = 0) and write their K/V into a scratch block no block table names.
Prefill and mixed (chunked-prefill) steps run eagerly: a graph captured on a decode batch froze
max_seqlen_q = 1 and is not valid for them (KERNELS.md, "CUDA graphs and varlen"); `graphs="full"`
replays every step kind from graphs bucketed over tokens and sequences (graphs.py), and
`graphs="piecewise"` every step's non-attention parts, attention eager between them (piecewise.py).
Under tensor parallelism each rank captures its own graphs, NCCL all-reduces inside, and every
rank replays the same bucket at the same step, since every rank runs the same schedule.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch

from attnbench.e2e.attention import PagedAttention
from attnbench.e2e.graphmem import CapturedGraphs, graph_mode_name
from attnbench.e2e.graphs import CUDAGRAPH_MODES, graph_buckets
from attnbench.e2e.piecewise import step_graphs
from attnbench.e2e.model import ModelArgs, Transformer
from attnbench.e2e.scheduler import KVCache, Sequence, schedule
from attnbench.errors import AttnbenchError
from attnbench.kernels.backends.base import Plan
from attnbench.kernels.metadata import SplitMetadata, VarlenMetadata, build_metadata
from attnbench.kernels.workload import Batch
from attnbench.profiler import nvtx_range

@dataclass
class Step:
    """One engine step, prepared on the host; decode rows come first, as metadata.split_batch expects."""

    rows: list[tuple[Sequence, int]]
    batch: Batch
    input_ids: list[int]
    positions: list[int]
    slot_mapping: list[int]
    block_table: torch.Tensor  # int32 [rows, max blocks], host
    sample_rows: list[int]  # rows whose last token is sampled (prompt complete, or decode)
    logits_indices: list[int]  # those rows' last token in the flat batch

    @property
    def kind(self) -> str:
        decode = self.batch.num_decode_seqs
        return "decode" if decode == self.batch.num_seqs else ("prefill" if decode == 0 else "mixed")


@dataclass
class StepRecord:
    kind: str
    rows: int
    tokens: int
    graph: bool
    host_us: float  # schedule + prepare + load (metadata, upload, plan)
    launch_host_us: float = math.nan  # issuing the forward (eager: every layer's kernels; graph: a replay)
    device_ms: float = math.nan


@dataclass
class Generation:
    tokens: list[list[int]]  # [request][output step]
    latency_s: list[float]  # per request: start of the run to its last token on the host
    total_s: float
    steps: list[StepRecord]
    logits: torch.Tensor | None = None  # [request, output step, vocab] when recorded


class Engine:
    def __init__(self, model: Transformer, cache: KVCache, attn: PagedAttention, max_num_seqs: int,
                 max_model_len: int, chunk_size: int | None = None, graphs: bool | str = False,
                 graph_policy: str = "safe", emulate: bool = False):
        """graphs: False / "none" (eager), True / "decode" (decode graphs), "full" (every step), "piecewise"
        (every step, attention eager). emulate: full and piecewise graphs on the CPU, for tests (graphs.py)."""
        self.model, self.cache, self.attn = model, cache, attn
        self.max_num_seqs, self.max_model_len = max_num_seqs, max_model_len
        self.token_budget = chunk_size or sys.maxsize
        self.device = model.tok_embeddings.device
        self.cuda = self.device.type == "cuda"
        self.graphs: dict[int, Callable[[], object]] = {}  # decode graphs' replays, by batch bucket
        self.decode_graphs: CapturedGraphs | None = None  # their pool
        mode = graph_mode_name(graphs)
        if mode not in CUDAGRAPH_MODES:
            raise AttnbenchError(f"CUDA graph mode {mode!r} is not built; choose from {', '.join(CUDAGRAPH_MODES)}")
        self.full, self.piecewise = step_graphs(self, mode, graph_policy, emulate)
        if mode == "decode" or (mode == "full" and self.full is None):  # full on a decode-only backend
            self.capture()

    def graph_stats(self) -> tuple[int, int]:
        """How many graphs this engine captured, and the device memory (bytes) their pools hold."""
        bucketed = [g for g in (self.full, self.piecewise) if g is not None]
        pools = [g for g in (self.decode_graphs, *bucketed) if g is not None]
        return len(self.graphs) + sum(g.num_graphs for g in bucketed), sum(g.mem_bytes for g in pools)

    def capture_s(self) -> float:
        """Seconds spent capturing bucketed graphs so far (on first use, inside steps)."""
        return sum(g.capture_s for g in (self.full, self.piecewise) if g is not None)

    # --- host side ---------------------------------------------------------------------------

    def prepare(self, rows: list[tuple[Sequence, int]]) -> Step:
        bs = self.cache.block_size
        ids, positions, slots, q_lens, kv_lens, decode, sample_rows, logits_indices = [], [], [], [], [], [], [], []
        for i, (seq, n) in enumerate(rows):
            start = seq.num_cached
            self.cache.allocate(seq, start + n)
            ids += seq.tokens[start:start + n]
            positions += range(start, start + n)
            slots += [seq.block_table[p // bs] * bs + p % bs for p in range(start, start + n)]
            q_lens.append(n)
            kv_lens.append(start + n)
            decode.append(seq.decoding)
            if start + n == len(seq.tokens):
                sample_rows.append(i)
                logits_indices.append(len(ids) - 1)
        table = torch.zeros((len(rows), max(len(s.block_table) for s, _ in rows)), dtype=torch.int32)
        for i, (seq, _) in enumerate(rows):
            table[i, :len(seq.block_table)] = torch.tensor(seq.block_table, dtype=torch.int32)
        return Step(rows, Batch(tuple(q_lens), tuple(kv_lens), tuple(decode)), ids, positions, slots,
                    table, sample_rows, logits_indices)

    def _upload(self, values, dtype: torch.dtype) -> torch.Tensor:
        host = torch.tensor(values, dtype=dtype, pin_memory=self.cuda)
        return host.to(self.device, non_blocking=True)

    def _copy_in(self, buffer: torch.Tensor, values: list[int]) -> None:
        buffer.copy_(torch.tensor(values, dtype=buffer.dtype, pin_memory=self.cuda), non_blocking=True)

    def load(self, step: Step) -> Callable[[], torch.Tensor]:
        """Move the step to the device; return the launch (eager forward or graph replay)."""
        if self.full is not None:
            return self.full.load(step)
        if step.kind == "decode" and self.graphs:
            return self._load_graph(step)
        if self.piecewise is not None:  # piecewise, or full's prefill/mixed steps on a decode-only backend
            return self.piecewise.load(step)
        metadata = build_metadata(self.attn.strategy, step.batch, step.block_table).to(self.device)
        self.attn.bind(self.attn.plan(metadata), self._upload(step.slot_mapping, torch.long))
        ids, pos = self._upload(step.input_ids, torch.long), self._upload(step.positions, torch.long)
        indices = self._upload(step.logits_indices, torch.long)
        return lambda: self.model(ids, pos, self.attn, indices)

    # --- decode graphs -----------------------------------------------------------------------

    def _static_metadata(self, bucket: int) -> VarlenMetadata | SplitMetadata:
        """The strategy's metadata for a decode batch at max_model_len: its tensors become buffers."""
        blocks = math.ceil(self.max_model_len / self.cache.block_size)
        batch = Batch((1,) * bucket, (self.max_model_len,) * bucket, (True,) * bucket)
        table = torch.zeros((bucket, blocks), dtype=torch.int32)
        return build_metadata(self.attn.strategy, batch, table).to(self.device)

    @staticmethod
    def _kv_buffers(md: VarlenMetadata | SplitMetadata) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(md, VarlenMetadata):
            return md.seqused_k, md.block_table
        return md.decode.cache_seqlens, md.decode.block_table

    @torch.inference_mode()
    def capture(self) -> None:
        self.decode_graphs = CapturedGraphs(self)  # refuses without CUDA
        n = self.max_num_seqs
        self.buckets = graph_buckets(n)
        self.static_ids = torch.zeros(n, dtype=torch.long, device=self.device)
        self.static_pos = torch.zeros(n, dtype=torch.long, device=self.device)
        self.static_slots = torch.full((n,), self.cache.scratch_slot, dtype=torch.long, device=self.device)
        self.static_logits = torch.empty((n, self.model.args.vocab_size), dtype=self.model.tok_embeddings.dtype,
                                         device=self.device)
        self.static_md: dict[int, VarlenMetadata | SplitMetadata] = {}
        self.graph_plans: dict[int, Plan] = {}  # kept alive with their graphs
        forwards = []
        for bucket in reversed(self.buckets):
            md = self.static_md[bucket] = self._static_metadata(bucket)
            self._kv_buffers(md)[0].zero_()  # capture on padding rows only: nothing read or kept
            plan = self.graph_plans[bucket] = self.attn.plan(md)  # planned once, outside the capture
            forwards.append(self._decode_forward(bucket, plan))
        self.graphs = dict(zip(reversed(self.buckets), self.decode_graphs.capture_all(forwards)))

    def _decode_forward(self, bucket: int, plan: Plan) -> Callable[[], None]:
        """One decode bucket's step on the static buffers, its plan bound (host only) first."""
        args, slots = (self.static_ids[:bucket], self.static_pos[:bucket], self.attn), self.static_slots[:bucket]

        def forward() -> None:
            self.attn.bind(plan, slots)  # the capture batch's rows are all padding: K/V go to the scratch slot
            self.static_logits[:bucket] = self.model(*args)
        return forward

    def _load_graph(self, step: Step) -> Callable[[], torch.Tensor]:
        n = len(step.rows)
        bucket = next(b for b in self.buckets if b >= n)
        pad = bucket - n
        kv_lens, table = self._kv_buffers(self.static_md[bucket])
        self._copy_in(self.static_ids[:bucket], step.input_ids + [0] * pad)
        self._copy_in(self.static_pos[:bucket], step.positions + [0] * pad)
        self._copy_in(self.static_slots[:bucket], step.slot_mapping + [self.cache.scratch_slot] * pad)
        self._copy_in(kv_lens, list(step.batch.kv_lens) + [0] * pad)
        table[:n, :step.block_table.shape[1]].copy_(step.block_table.pin_memory(), non_blocking=True)
        refresh = self.graph_plans[bucket].refresh
        if refresh is not None:  # the library re-plans this batch into the buffers the graph reads
            host_table = torch.zeros(tuple(table.shape), dtype=torch.int32)
            host_table[:n, :step.block_table.shape[1]] = step.block_table
            padded = Batch((1,) * bucket, tuple(step.batch.kv_lens) + (0,) * pad, (True,) * bucket)
            refresh(build_metadata(self.attn.strategy, padded, host_table))
        graph, logits = self.graphs[bucket], self.static_logits[:n]

        def replay() -> torch.Tensor:
            graph()
            return logits
        return replay

    # --- a whole run -------------------------------------------------------------------------

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], output_len: int, record_logits: bool = False) -> Generation:
        """Greedy generation of exactly output_len tokens per prompt, all requests arriving at once."""
        longest = max(len(p) for p in prompts) + output_len
        if len(prompts) > self.max_num_seqs or longest > self.max_model_len:
            raise AttnbenchError(f"{len(prompts)} requests of up to {longest} tokens do not fit an engine made for "
                                 f"{self.max_num_seqs} x {self.max_model_len}")
        self.cache.reset()
        seqs = [Sequence(i, list(p), len(p), output_len) for i, p in enumerate(prompts)]
        vocab = self.model.args.vocab_size
        record = (torch.empty((len(seqs), output_len, vocab), dtype=self.model.tok_embeddings.dtype, device=self.device)
                  if record_logits else None)
        latency = [math.nan] * len(seqs)
        records, events = [], []
        if self.cuda:
            torch.cuda.synchronize(self.device)
        start = time.perf_counter()
        while not all(seq.finished for seq in seqs):
            host_start, captured = time.perf_counter(), self.capture_s()
            step = self.prepare(schedule(seqs, self.token_budget))
            launch = self.load(step)
            graph = self.full is not None or self.piecewise is not None or (step.kind == "decode" and bool(self.graphs))
            device_start = time.perf_counter()
            capture_s = self.capture_s() - captured  # a first-use capture is not host time
            records.append(StepRecord(step.kind, len(step.rows), len(step.input_ids), graph,
                                      (device_start - host_start - capture_s) * 1e6))
            if self.cuda:
                events.append((torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)))
                events[-1][0].record()
            with nvtx_range(f"{step.kind} step"):  # Nsight Systems / torch.profiler: one range per engine step
                issue_start = time.perf_counter()
                logits = launch()
                records[-1].launch_host_us = (time.perf_counter() - issue_start) * 1e6
                next_tokens = logits.argmax(dim=-1)
                if self.cuda:
                    events[-1][1].record()
                tokens = next_tokens.tolist()
            now = time.perf_counter()
            if not self.cuda:
                records[-1].device_ms = (now - device_start) * 1e3
            for seq, n in step.rows:
                seq.num_cached += n
            sampled = [step.rows[r][0] for r in step.sample_rows]
            if record is not None:
                record[[s.index for s in sampled], [s.num_outputs for s in sampled]] = logits
            for seq, token in zip(sampled, tokens):
                seq.tokens.append(token)
                if seq.finished:
                    latency[seq.index] = now - start
                    self.cache.release(seq)
        total = time.perf_counter() - start
        for rec, (begin, end) in zip(records, events):
            rec.device_ms = begin.elapsed_time(end)
        return Generation([s.tokens[s.prompt_len:] for s in seqs], latency, total, records, record)


def estimate_bytes(args: ModelArgs, dtype_bytes: int, max_num_seqs: int, max_model_len: int, block_size: int,
                   max_step_tokens: int, recorded_logits: int) -> dict[str, int]:
    """What a run holds on the device: weights, KV cache, the largest step's activations, and the
    logits the agreement check keeps (recorded_logits = requests x output steps x runs at once)."""
    blocks = KVCache.blocks_for(max_num_seqs, max_model_len, block_size) + 1
    kv = 2 * args.n_layer * blocks * block_size * args.n_kv_head * args.head_dim * dtype_bytes
    per_token = 4 * args.dim + 3 * (args.n_head + args.n_kv_head) * args.head_dim + 3 * args.ffn_dim
    activations = max_step_tokens * per_token * dtype_bytes + 2 * max_num_seqs * args.vocab_size * 4
    return {"weights": args.num_params * dtype_bytes, "kv_cache": kv, "activations": activations,
            "agreement_logits": recorded_logits * args.vocab_size * dtype_bytes}
