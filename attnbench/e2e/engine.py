"""The e2e engine: prefill/decode steps over a paged KV cache, eagerly or replayed from CUDA graphs.

nano-vllm's shape. `schedule` (scheduler.py) picks rows; `prepare` turns them into plain lists
and a host block table (a scheduler.Step); `load` moves them to the device once, building the
strategy's metadata with attnbench's own builders, plans the backend's strategy once for the step
and binds that plan for every layer; the launch it returns only computes. Per step: host time
before the launch (schedule + prepare + load, planning included), host time to issue the launch,
and device time (launch + greedy sampling, by CUDA events).

Graphs. The engine's GraphMode (modes.py) and its backend decide, in modes.choose_graphs, which
graphs it holds, and `load` hands each step to the graphs that replay it: decode graphs
(decode_graphs.py) replay decode steps; full graphs (graphs.py) every step, bucketed over tokens
and sequences; piecewise graphs (piecewise.py) every step's non-attention parts, attention eager
between them. A graph captured on a decode batch froze max_seqlen_q = 1 and is not valid for
prefill or mixed steps: under `decode` they run eagerly. All three are peers behind one
interface (graphmem.CapturedGraphs: `load(step)`), and use this engine through its public
methods only (graphmem.GraphEngine: `upload`, `copy_in`, `prepare_attention`). Under tensor
parallelism each rank captures its own graphs, NCCL all-reduces inside, and every rank replays
the same bucket at the same step, since every rank runs the same schedule.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch

from attnbench.e2e.attention import PagedAttention
from attnbench.e2e.decode_graphs import DecodeGraphs
from attnbench.e2e.graphmem import CapturedGraphs
from attnbench.e2e.graphs import FullGraphs
from attnbench.e2e.model import ModelArgs, Transformer
from attnbench.e2e.modes import GraphMode, choose_graphs
from attnbench.e2e.piecewise import PiecewiseGraphs
from attnbench.e2e.scheduler import KVCache, Sequence, Step, schedule
from attnbench.errors import AttnbenchError
from attnbench.kernels.metadata import build_metadata
from attnbench.kernels.workload import Batch
from attnbench.profiler import nvtx_range


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
    """One model, KV cache and attention backend x strategy, in one graph mode: `prepare` a step on
    the host, `load` it (eagerly or into the graphs that replay it), launch; `generate` runs requests."""

    def __init__(self, model: Transformer, cache: KVCache, attn: PagedAttention, max_num_seqs: int,
                 max_model_len: int, chunk_size: int | None = None, cudagraph: GraphMode = GraphMode.NONE,
                 graph_policy: str = "safe", emulate: bool = False):
        """cudagraph: the mode, as modes.choose_graphs gave it for this backend and device (a mode it
        would not run here is refused). emulate: full and piecewise graphs on the CPU, for tests."""
        self.model, self.cache, self.attn = model, cache, attn
        self.max_num_seqs, self.max_model_len = max_num_seqs, max_model_len
        self.token_budget = chunk_size or sys.maxsize
        self.device = model.tok_embeddings.device
        self.cuda = self.device.type == "cuda"
        choice = choose_graphs(attn.backend, cudagraph, "cuda" if emulate else self.device.type, max_num_seqs)
        if choice.cudagraph != cudagraph:
            raise AttnbenchError(f"CUDA graph mode {cudagraph} does not run here: {choice.note}")
        self.decode = DecodeGraphs(self) if choice.decode else None
        self.full = FullGraphs(self, graph_policy, emulate) if choice.full else None
        self.piecewise = PiecewiseGraphs(self, emulate) if choice.piecewise else None

    def _captured(self) -> list[CapturedGraphs]:
        return [g for g in (self.decode, self.full, self.piecewise) if g is not None]

    def graph_stats(self) -> tuple[int, int]:
        """How many graphs this engine captured, and the device memory (bytes) their pools hold."""
        return sum(g.num_graphs for g in self._captured()), sum(g.mem_bytes for g in self._captured())

    def capture_every(self, max_step_tokens: int) -> int:
        """Every graph a step of at most max_step_tokens tokens (and the token budget) can replay,
        captured now, so that a timed run captures none; how many were captured."""
        before = self.graph_stats()[0]
        for graphs in self._captured():
            graphs.capture_every(min(max_step_tokens, self.token_budget))
        return self.graph_stats()[0] - before

    def capture_s(self) -> float:
        """Seconds spent capturing graphs so far (full and piecewise: on first use, inside steps)."""
        return sum(g.capture_s for g in self._captured())

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

    def upload(self, values: list[int], dtype: torch.dtype) -> torch.Tensor:
        """values on the device, through pinned memory, not waited for."""
        host = torch.tensor(values, dtype=dtype, pin_memory=self.cuda)
        return host.to(self.device, non_blocking=True)

    def copy_in(self, buffer: torch.Tensor, values: list[int]) -> None:
        """values into a static buffer (a graph's input), not waited for."""
        buffer.copy_(torch.tensor(values, dtype=buffer.dtype, pin_memory=self.cuda), non_blocking=True)

    def prepare_attention(self, step: Step) -> None:
        """The step's own metadata on the device, planned once and bound for every layer with its slots."""
        metadata = build_metadata(self.attn.strategy, step.batch, step.block_table).to(self.device)
        self.attn.bind(self.attn.plan(metadata), self.upload(step.slot_mapping, torch.long))

    def graphs_for(self, step: Step) -> CapturedGraphs | None:
        """The graphs that replay this step (None: it runs eagerly). Full graphs replay every step;
        decode graphs the decode steps; piecewise graphs the steps left (all of them under piecewise)."""
        if self.full is not None:
            return self.full
        if step.kind == "decode" and self.decode is not None:
            return self.decode
        return self.piecewise

    def load(self, step: Step) -> Callable[[], torch.Tensor]:
        """Move the step to the device; return the launch (eager forward or graph replay)."""
        graphs = self.graphs_for(step)
        if graphs is not None:
            return graphs.load(step)
        self.prepare_attention(step)
        ids, pos = self.upload(step.input_ids, torch.long), self.upload(step.positions, torch.long)
        indices = self.upload(step.logits_indices, torch.long)
        return lambda: self.model(ids, pos, self.attn, indices)

    # --- a whole run -------------------------------------------------------------------------

    def run_step(self, rows: list[tuple[Sequence, int]], records: list[StepRecord],
                 events: list) -> tuple[list[Sequence], torch.Tensor]:
        """One step of `rows`: prepare, load, launch, sample greedily; each sampled sequence gets its
        token (a finished one gives its blocks back). Appends the step's record (and on CUDA its
        events: finish_records reads them once the run is over). Returns (sampled, their logits)."""
        host_start, captured = time.perf_counter(), self.capture_s()
        step = self.prepare(rows)
        launch = self.load(step)
        graph = self.graphs_for(step) is not None
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
        if not self.cuda:
            records[-1].device_ms = (time.perf_counter() - device_start) * 1e3
        for seq, n in step.rows:
            seq.num_cached += n
        sampled = [step.rows[r][0] for r in step.sample_rows]
        for seq, token in zip(sampled, tokens):
            seq.tokens.append(token)
            if seq.finished:
                self.cache.release(seq)
        return sampled, logits

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
            sampled, logits = self.run_step(schedule(seqs, self.token_budget), records, events)
            now = time.perf_counter()
            if record is not None:
                record[[s.index for s in sampled], [s.num_outputs - 1 for s in sampled]] = logits
            for seq in sampled:
                if seq.finished:
                    latency[seq.index] = now - start
        total = time.perf_counter() - start
        finish_records(records, events)
        return Generation([s.tokens[s.prompt_len:] for s in seqs], latency, total, records, record)


def finish_records(records: list[StepRecord], events: list) -> None:
    """Each CUDA step's device time from its events, once the run is over (reading one waits for it)."""
    for rec, (begin, end) in zip(records, events):
        rec.device_ms = begin.elapsed_time(end)


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
