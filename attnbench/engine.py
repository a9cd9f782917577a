"""The e2e engine: a paged KV cache, a token-budget scheduler, prefill/decode steps, decode graphs.

nano-vllm's shape in one file. `schedule` picks rows (decode rows first, one token each, then
prompt chunks within the token budget); `prepare` turns them into plain lists and a host block
table; `load` moves them to the device once, building the strategy's metadata with attnbench's
own builders; the launch it returns only computes. Host time (schedule + prepare + load) and
device time (launch + greedy sampling, by CUDA events) are recorded per step.

Decode steps replay CUDA graphs, one per batch-size bucket, captured largest first in one memory
pool on static buffers. Each bucket's metadata is built once for a decode batch at the engine's
max_model_len (the static max_seqlen_k of KERNELS.md's recipe) and its tensors are the buffers
the live batch is copied into. Padding rows are harmless: they attend to zero keys
(seqused_k / cache_seqlens = 0) and write their K/V into a scratch block no block table names.
Prefill and mixed (chunked-prefill) steps run eagerly: a graph captured on a decode batch froze
max_seqlen_q = 1 and is not valid for them (KERNELS.md, "CUDA graphs and varlen").
"""

from __future__ import annotations

import math
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from attnbench.attention_ops import PagedAttention
from attnbench.errors import AttnbenchError
from attnbench.metadata import SplitMetadata, VarlenMetadata, build_metadata
from attnbench.model import ModelArgs, Transformer
from attnbench.profiling import nvtx_range
from attnbench.workload import Batch

GRAPH_NOTE = "decode steps replay CUDA graphs (buckets {buckets}); prefill and mixed steps run eagerly"


def graph_buckets(max_num_seqs: int) -> list[int]:
    """nano-vllm's batch buckets: 1, 2, 4, 8, then every 16, up to max_num_seqs (always included)."""
    buckets = [b for b in [1, 2, 4, 8, *range(16, max_num_seqs + 1, 16)] if b <= max_num_seqs]
    return buckets if buckets[-1] == max_num_seqs else buckets + [max_num_seqs]


def make_prompts(batch_size: int, input_len: int, vocab_size: int, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (batch_size, input_len), generator=gen).tolist()


@dataclass
class Sequence:
    index: int
    tokens: list[int]  # prompt, then generated tokens
    prompt_len: int
    output_len: int
    num_cached: int = 0  # tokens whose K/V are in the cache
    block_table: list[int] = field(default_factory=list)

    @property
    def num_outputs(self) -> int:
        return len(self.tokens) - self.prompt_len

    @property
    def finished(self) -> bool:
        return self.num_outputs >= self.output_len

    @property
    def decoding(self) -> bool:
        return self.num_cached >= self.prompt_len


def schedule(seqs: list[Sequence], token_budget: int) -> list[tuple[Sequence, int]]:
    """(sequence, new tokens) rows: decode rows first, then prompt chunks in what budget is left."""
    rows, budget = [], token_budget
    for seq in seqs:
        if not seq.finished and seq.decoding and budget > 0:
            rows.append((seq, 1))
            budget -= 1
    for seq in seqs:
        if not seq.decoding and budget > 0:
            n = min(seq.prompt_len - seq.num_cached, budget)
            rows.append((seq, n))
            budget -= n
    return rows


class KVCache:
    """Every layer's pages, (num_blocks, block_size, kv_heads, head_dim) each, and the free blocks.

    One block past the end is a scratch block, never handed out: graph padding rows write there.
    """

    def __init__(self, args: ModelArgs, num_blocks: int, block_size: int, dtype: torch.dtype, device, seed: int = 0):
        self.num_blocks, self.block_size, self.seed = num_blocks, block_size, seed
        shape = (args.n_layer, num_blocks + 1, block_size, args.n_kv_head, args.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.scratch_slot = num_blocks * block_size
        self.reset()

    @staticmethod
    def blocks_for(max_num_seqs: int, max_model_len: int, block_size: int) -> int:
        return max_num_seqs * math.ceil(max_model_len / block_size)

    def reset(self) -> None:
        """All blocks free, handed out in a seeded shuffled order: scattered pages, as in a long run."""
        self.free = list(range(self.num_blocks))
        random.Random(self.seed).shuffle(self.free)

    def allocate(self, seq: Sequence, num_tokens: int) -> None:
        need = math.ceil(num_tokens / self.block_size) - len(seq.block_table)
        if need > len(self.free):
            raise AttnbenchError(f"KV cache out of blocks: need {need}, {len(self.free)} free")
        seq.block_table += [self.free.pop() for _ in range(max(need, 0))]

    def release(self, seq: Sequence) -> None:
        self.free += seq.block_table
        seq.block_table = []


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
    host_us: float
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
                 max_model_len: int, chunk_size: int | None = None, graphs: bool = False):
        self.model, self.cache, self.attn = model, cache, attn
        self.max_num_seqs, self.max_model_len = max_num_seqs, max_model_len
        self.token_budget = chunk_size or sys.maxsize
        self.device = model.tok_embeddings.device
        self.cuda = self.device.type == "cuda"
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        if graphs:
            self.capture()

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
        if step.kind == "decode" and self.graphs:
            return self._load_graph(step)
        metadata = build_metadata(self.attn.strategy, step.batch, step.block_table).to(self.device)
        self.attn.bind(metadata, self._upload(step.slot_mapping, torch.long))
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
        if not self.cuda:
            raise AttnbenchError("CUDA graphs need a CUDA device")
        n = self.max_num_seqs
        self.buckets = graph_buckets(n)
        self.static_ids = torch.zeros(n, dtype=torch.long, device=self.device)
        self.static_pos = torch.zeros(n, dtype=torch.long, device=self.device)
        self.static_slots = torch.full((n,), self.cache.scratch_slot, dtype=torch.long, device=self.device)
        self.static_logits = torch.empty((n, self.model.args.vocab_size), dtype=self.model.tok_embeddings.dtype,
                                         device=self.device)
        self.static_md: dict[int, VarlenMetadata | SplitMetadata] = {}
        pool = None
        for bucket in reversed(self.buckets):
            md = self.static_md[bucket] = self._static_metadata(bucket)
            self._kv_buffers(md)[0].zero_()  # capture on padding rows only: nothing read or kept
            self.attn.bind(md, self.static_slots[:bucket])
            args = (self.static_ids[:bucket], self.static_pos[:bucket], self.attn)
            self.static_logits[:bucket] = self.model(*args)  # warm-up: lazy inits stay out of the graph
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool):
                self.static_logits[:bucket] = self.model(*args)
            pool = pool or graph.pool()
            self.graphs[bucket] = graph
        torch.cuda.synchronize(self.device)

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
        graph, logits = self.graphs[bucket], self.static_logits[:n]

        def replay() -> torch.Tensor:
            graph.replay()
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
            host_start = time.perf_counter()
            step = self.prepare(schedule(seqs, self.token_budget))
            launch = self.load(step)
            graph = step.kind == "decode" and bool(self.graphs)
            device_start = time.perf_counter()
            records.append(StepRecord(step.kind, len(step.rows), len(step.input_ids), graph,
                                      (device_start - host_start) * 1e6))
            if self.cuda:
                events.append((torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)))
                events[-1][0].record()
            with nvtx_range(f"{step.kind} step"):  # Nsight Systems / torch.profiler: one range per engine step
                logits = launch()
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
