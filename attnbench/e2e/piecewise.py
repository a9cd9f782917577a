"""Piecewise CUDA graphs for the e2e engine: everything but attention replayed from graphs, attention eager.

Why: `--cudagraph full` puts attention inside the graph, which needs the graph-safety recipe
(static max_seqlen bounds, padded metadata) and a backend whose plans replay on any batch; a
backend that cannot (FlashInfer's wrappers replay on pure-decode batches only) would run mixed
steps eagerly and host-bound. vLLM V1's PIECEWISE mode splits the model at the attention op:
the GEMMs, norms, RoPE, SwiGLU and LM head replay from graphs bucketed by token count, and the
attention call runs eagerly in between with the step's own metadata and plan. This is that mode
(`--cudagraph piecewise`), and what `full` runs the prefill and mixed steps of a backend whose
`graph_replay` is "decode-only" with, its decode steps replaying decode graphs (vLLM's
FULL_AND_PIECEWISE; modes.choose_graphs).

Segments. Per token bucket, n_layer + 1 graphs on static buffers: embedding, RoPE cos/sin and
layer 0's q/k/v; then, per layer i >= 1, layer i-1's output projection, residual and MLP followed
by layer i's q/k/v; last, the last layer's post-attention part, the final norm and the LM head
on the sampled rows (`logits_indices`, padded with row 0). The residual stream, cos/sin, q/k/v,
the attention output and the logits are static buffers each segment copies into: no tensor of
one graph's pool is read by another, so the order in which buckets were captured never matters.

Padding. A step of n tokens replays the smallest bucket >= n (graphs.token_buckets). Attention
runs on the first n rows only (q[:n], the real tokens, decode rows first as eager has them), with
the step's unpadded metadata, plan and slot mapping, and writes its output into the static
output's first n rows: padding rows never reach attention, so they write no K/V at all (no
scratch slot is needed) and read none. Their output rows keep stale finite values that feed only
padding rows: every op in a segment is row-wise, and the LM head reads real rows only. Real rows
may still differ from eager in the last bits where a GEMM picks another kernel for the padded
row count, as under `full`; the agreement check allows near-ties.

Decode steps replay the same piecewise graphs (attention eager there too), so `piecewise`
measures one thing on every step kind; `decode` and `full` are the modes whose decode attention
is in a graph. The plan is made per step, as eager makes it, and counts in the step's host time.
Graphs are captured the first time a step needs their bucket (the runner's untimed check run),
in one memory pool shared by this engine's piecewise graphs; capture time is left out of host time.
`emulate` (CPU tests): a "replay" runs the segment again on the static buffers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from attnbench.e2e.graphmem import CapturedGraphs, GraphEngine
from attnbench.e2e.graphs import fewest, round_up, token_buckets
from attnbench.e2e.model import applies_rope
from attnbench.e2e.scheduler import Step


@dataclass
class _Static:
    """One bucket's buffers, at fixed addresses: the segments' inputs and outputs."""

    input_ids: torch.Tensor  # [tokens]
    positions: torch.Tensor
    logits_indices: torch.Tensor  # [min(tokens, max_num_seqs)]
    x: torch.Tensor  # the residual stream [tokens, dim]
    cos: torch.Tensor
    sin: torch.Tensor
    q: torch.Tensor  # [tokens, heads, head_dim]
    k: torch.Tensor
    v: torch.Tensor
    attn_out: torch.Tensor  # the eager attention's output, q's shape
    logits: torch.Tensor  # [min(tokens, max_num_seqs), vocab]


class PiecewiseGraphs(CapturedGraphs):
    """One engine's piecewise graphs, by token bucket, captured on first use."""

    def __init__(self, engine: GraphEngine, emulate: bool = False):
        super().__init__(engine, emulate)
        self.tok_buckets = token_buckets(min(engine.token_budget, engine.max_num_seqs * engine.max_model_len))
        self.graphs: dict[int, tuple[_Static, list[Callable[[], None]]]] = {}  # bucket -> buffers, segment replays

    @property
    def num_graphs(self) -> int:
        return sum(len(replays) for _, replays in self.graphs.values())

    def capture_every(self, max_tokens: int) -> None:
        """Every token bucket a step of at most max_tokens tokens can need, captured now."""
        for tokens in self.tok_buckets:
            if fewest(tokens, self.tok_buckets) <= max_tokens and tokens not in self.graphs:
                self._capture(tokens)

    def load(self, step: Step) -> Callable[[], torch.Tensor]:
        """The step's inputs into the bucket's buffers, its own plan bound (as eager binds it); the launch."""
        e, n, sampled = self.engine, len(step.input_ids), len(step.logits_indices)
        tokens = round_up(n, self.tok_buckets)
        s, replays = self.graphs.get(tokens) or self._capture(tokens)
        e.prepare_attention(step)
        e.copy_in(s.input_ids, step.input_ids + [0] * (tokens - n))
        e.copy_in(s.positions, step.positions + [0] * (tokens - n))
        e.copy_in(s.logits_indices, step.logits_indices + [0] * (s.logits_indices.shape[0] - sampled))
        q, k, v, out = s.q[:n], s.k[:n], s.v[:n], s.attn_out[:n]
        logits, attn = s.logits[:sampled], e.attn
        rope = {"rope": (s.cos[:n], s.sin[:n])} if applies_rope(attn) else {}  # q, k stored unturned then

        def launch() -> torch.Tensor:
            for layer, replay in enumerate(replays[:-1]):
                replay()
                attn(layer, q, k, v, out, **rope)
            replays[-1]()
            return logits
        return launch

    def _buffers(self, tokens: int) -> _Static:
        e, a = self.engine, self.engine.model.args
        dtype, rope = e.model.tok_embeddings.dtype, e.model.rope_cos
        rows = min(tokens, e.max_num_seqs)  # a sampled row is a token of its own sequence

        def zeros(*shape: int, dtype: torch.dtype = dtype) -> torch.Tensor:
            return torch.zeros(shape, dtype=dtype, device=e.device)
        return _Static(zeros(tokens, dtype=torch.long), zeros(tokens, dtype=torch.long), zeros(rows, dtype=torch.long),
                       zeros(tokens, a.dim), zeros(tokens, rope.shape[1], dtype=rope.dtype),
                       zeros(tokens, rope.shape[1], dtype=rope.dtype), zeros(tokens, a.n_head, a.head_dim),
                       zeros(tokens, a.n_kv_head, a.head_dim), zeros(tokens, a.n_kv_head, a.head_dim),
                       zeros(tokens, a.n_head, a.head_dim), zeros(rows, a.vocab_size))

    def _segments(self, s: _Static) -> list[Callable[[], None]]:
        """The n_layer + 1 functions between attention calls, each reading and writing `s` only."""
        model = self.engine.model

        def store(layer: int, x: torch.Tensor, residual: torch.Tensor | None) -> None:
            """layer's q/k/v and the residual stream it leaves, into the buffers attention and the
            next segment read."""
            qkv, h = model.layers[layer].pre_attention(x, residual, s.cos, s.sin, rotate=not applies_rope(self.engine.attn))
            for buffer, value in zip((s.q, s.k, s.v, s.x), (*qkv, h)):
                buffer.copy_(value)

        def first() -> None:
            x, cos, sin = model.embed(s.input_ids, s.positions)
            s.cos.copy_(cos)
            s.sin.copy_(sin)
            store(0, x, None)

        def between(layer: int) -> Callable[[], None]:
            def run() -> None:  # layer - 1's post-attention part, then layer's pre-attention part
                store(layer, *model.layers[layer - 1].post_attention(s.x, s.attn_out))
            return run

        def last() -> None:
            x, h = model.layers[-1].post_attention(s.x, s.attn_out)
            s.logits.copy_(model.head(x, h, s.logits_indices))
        return [first, *(between(i) for i in range(1, len(model.layers))), last]

    @torch.inference_mode()
    def _capture(self, tokens: int) -> tuple[_Static, list[Callable[[], None]]]:
        start = time.perf_counter()
        s = self._buffers(tokens)
        self.graphs[tokens] = s, self.capture_all(self._segments(s))
        self.capture_s += time.perf_counter() - start
        return self.graphs[tokens]
