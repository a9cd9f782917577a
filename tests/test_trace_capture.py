"""Graphs captured before a timed serve (e2e --trace): every bucket a step within the engine's
limits can need is captured up front, so a serve whose schedule follows the wall clock captures
none. On the CPU: random batches against the enumeration, and emulated full and piecewise graphs
serving a trace on a fake clock after `capture_every`."""

from __future__ import annotations

import random

import pytest
import torch
from test_graphsafe import grid_backend

from attnbench.e2e.attention import PagedAttention
from attnbench.e2e.engine import Engine
from attnbench.e2e.graphs import full_bucket, reachable_buckets, token_buckets
from attnbench.e2e.modes import GraphMode, graph_buckets
from attnbench.e2e.model import ModelArgs, random_model
from attnbench.e2e.runner import ModelEngines
from attnbench.e2e.serving import serve, trace_prompts
from attnbench.kernels.backends.registry import get_backend
from attnbench.kernels.workload import Batch

TINY = ModelArgs.from_name("tiny")


def random_batch(rng: random.Random, max_num_seqs: int, max_tokens: int) -> Batch:
    """Decode rows first (one token each), then prefill chunks, within both limits."""
    decode = rng.randint(0, min(max_num_seqs, max_tokens))
    chunks = []
    while decode + len(chunks) < max_num_seqs and decode + sum(chunks) < max_tokens and rng.random() < 0.7:
        chunks.append(rng.randint(1, max_tokens - decode - sum(chunks)))
    if not decode and not chunks:
        chunks = [rng.randint(1, max_tokens)]
    q = [1] * decode + chunks
    return Batch(tuple(q), tuple(n + 7 for n in q), tuple([True] * decode + [False] * len(chunks)))


@pytest.mark.parametrize("strategy", ["unified", "split"])
@pytest.mark.parametrize("max_num_seqs,max_tokens", [(4, 16), (16, 100), (33, 64), (5, 3)])
def test_every_batch_within_the_limits_has_its_bucket_enumerated(strategy, max_num_seqs, max_tokens):
    seq_buckets, tok_buckets = graph_buckets(max_num_seqs), token_buckets(max_tokens)
    enumerated = set(reachable_buckets(strategy, seq_buckets, tok_buckets, max_num_seqs, max_tokens, 4, 16))
    rng = random.Random(max_num_seqs * max_tokens)
    needed = {full_bucket(strategy, random_batch(rng, max_num_seqs, max_tokens), seq_buckets, tok_buckets, 4, 16)
              for _ in range(3000)}
    assert needed <= enumerated
    for bucket in enumerated:  # and none that no batch within the limits needs: each has a witness
        assert full_bucket(strategy, witness(bucket, strategy, seq_buckets, tok_buckets), seq_buckets, tok_buckets,
                           4, 16) == bucket
        assert sum(witness(bucket, strategy, seq_buckets, tok_buckets).query_lens) <= max_tokens


def witness(bucket, strategy: str, seq_buckets: list[int], tok_buckets: list[int]) -> Batch:
    """The smallest batch in a bucket: the fewest sequences and tokens that round up to it."""
    least = lambda n, buckets: 0 if n == 0 else max([b for b in buckets if b < n], default=0) + 1  # noqa: E731
    if strategy == "unified" and bucket.max_query_len == 1:
        decode, prefill, tokens = least(bucket.max_prefill_seqs, seq_buckets), 0, 0
    elif strategy == "unified":
        decode, prefill = 0, least(bucket.max_prefill_seqs, seq_buckets)
        tokens = max(least(bucket.max_tokens, tok_buckets), prefill)
    else:
        decode, prefill = least(bucket.max_decode_seqs, seq_buckets), least(bucket.max_prefill_seqs, seq_buckets)
        tokens = max(least(bucket.max_tokens, tok_buckets), prefill)
    chunks = [1] * (prefill - 1) + [tokens - prefill + 1] if prefill else []
    q = [1] * decode + chunks
    return Batch(tuple(q), tuple(n + 7 for n in q), tuple([True] * decode + [False] * len(chunks)))


def engine_under(mode: GraphMode, backend, strategy: str) -> Engine:
    model = random_model(TINY, torch.bfloat16, "cpu", seed=3)
    engines = ModelEngines(model, max_num_seqs=3, max_model_len=24, chunk_size=8)
    attn = PagedAttention(backend, strategy, engines.point, engines.cache.k, engines.cache.v)
    return Engine(model, engines.cache, attn, 3, 24, 8, mode, emulate=True)


class JitterClock:
    """A fake clock whose steps take a random while: each serve meets other batches."""

    def __init__(self, seed: int):
        self.t, self.rng = 0.0, random.Random(seed)

    def now(self) -> float:
        self.t += self.rng.uniform(0.1, 1.5)
        return self.t

    def wait_until(self, t: float) -> None:
        self.t = max(self.t, t)


@pytest.mark.parametrize("strategy", ["unified", "split"])
@pytest.mark.parametrize("mode", [GraphMode.FULL, GraphMode.PIECEWISE])
def test_a_serve_after_capture_every_captures_nothing(mode, strategy):
    backend = grid_backend()[0] if mode == GraphMode.FULL else get_backend("reference")
    engine = engine_under(mode, backend, strategy)
    lens, outs = [9, 3, 14, 6], [3, 4, 2, 3]
    captured = engine.capture_every(sum(lens))
    assert captured == engine.graph_stats()[0] > 0
    for seed in range(3):
        arrivals = sorted(random.Random(seed).uniform(0, 6) for _ in lens)
        served = serve(engine, arrivals, trace_prompts(lens, TINY.vocab_size), outs, JitterClock(seed))
        assert all(s.graph for s in served.steps)
        assert engine.graph_stats()[0] == captured, f"seed {seed}: a serve captured a graph"
    assert engine.capture_every(sum(lens)) == 0  # nothing left to capture


def test_without_capture_every_a_serve_captures_on_first_use():
    """The counter the job records moves when a bucket is first met inside a serve."""
    engine = engine_under(GraphMode.FULL, grid_backend()[0], "unified")
    serve(engine, [0.0, 0.5], trace_prompts([9, 12], TINY.vocab_size), [3, 2], JitterClock(0))
    assert engine.graph_stats()[0] > 0


def test_the_job_captures_before_timing_and_every_timed_serve_captures_none(monkeypatch, tmp_path):
    """serve_choices under emulated piecewise graphs: every row says 0 graphs captured while timed."""
    import dataclasses
    import functools
    import json

    from rich.console import Console

    from attnbench.e2e import runner
    from attnbench.e2e.args import E2EArgs
    from attnbench.e2e.modes import choose_graphs
    from attnbench.runs.e2e_trace import read_trace, trace_setup
    from attnbench.runs.e2e_trace_serves import serve_choices

    monkeypatch.setattr(runner, "Engine", functools.partial(Engine, emulate=True))
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": i, "output_length": o}) + "\n"
                             for t, i, o in [(0.0, 9, 3), (0.001, 14, 2), (0.002, 5, 3)]))
    args = E2EArgs(model="tiny", trace=trace, backend=["reference"], chunk_size=8, iters=2, device="cpu")
    setup = trace_setup(args, read_trace(trace, None), torch.device("cpu"))
    choice = choose_graphs(get_backend("reference"), GraphMode.PIECEWISE, "cuda", setup.max_num_seqs, TINY.n_layer)
    setup = dataclasses.replace(setup, choices={"reference": choice})
    rows, requests, agreements = [], [], []
    serve_choices(setup, Console(file=open(tmp_path / "log", "w")), rows, requests, agreements)
    assert [r.get("reason") for r in rows if r["serve"] == 0] == []
    assert [(r["strategy"], r["serve"]) for r in rows] == [("unified", 1), ("split", 1), ("split", 2), ("unified", 2)]
    assert all(r["verdict"] == "pass" and r["graphs_captured_while_serving"] == 0 for r in rows)
    assert all(r["graphs_before_timing"] == 3 * 4 for r in rows)  # token buckets 1, 2, 4, 8; n_layer + 1 each
    assert {a["verdict"] for a in agreements} <= {"match", "near-tie"} and len(requests) == 4 * 3
