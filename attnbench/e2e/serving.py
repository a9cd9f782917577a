"""The engine serving a request trace: each request joins once its arrival time has passed, as at a server.

Why: `Engine.generate` runs a batch that arrives at once, which is what `vllm bench latency` times;
`vllm bench serve` users read how a stream of requests is served (TTFT, TPOT, ITL: serve_metrics.py).
Continuous batching in nano-vllm's terms: before each step the requests whose arrival (seconds
after serving began, on the wall clock) has passed join the waiting queue; waiting requests start
running in arrival order while fewer than `max_num_seqs` run (the KV cache holds that many
sequences of `max_model_len`); `schedule` then picks rows among the running ones (decode rows first,
prompt chunks in the token budget). With nothing to run the loop waits until the next arrival,
never past it. Every request generates exactly its trace's output length (EOS ignored, as
`vllm bench serve --ignore-eos`). The clock is a parameter, so tests can serve on a fake one.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Protocol

import torch

from attnbench.e2e.engine import Engine, StepRecord, finish_records
from attnbench.e2e.scheduler import Sequence, schedule
from attnbench.errors import AttnbenchError


class Clock(Protocol):
    """Seconds on some monotonic clock, and a wait until a time on it."""

    def now(self) -> float: ...

    def wait_until(self, t: float) -> None: ...


class WallClock:
    """time.perf_counter, and a sleep until a time on it."""

    def now(self) -> float:
        return time.perf_counter()

    def wait_until(self, t: float) -> None:
        wait = t - time.perf_counter()
        if wait > 0:
            time.sleep(wait)


@dataclass(frozen=True)
class ServedRequest:
    """One request as the engine served it; times in seconds after serving began."""

    arrival: float  # when it was due (the trace's time, or 0 with every request at once)
    input_len: int
    token_times: tuple[float, ...]  # when each generated token was on the host, in order
    tokens: tuple[int, ...]


@dataclass
class Served:
    """A whole trace served: its requests in trace order, from the start to the last token."""

    requests: list[ServedRequest]
    duration_s: float
    steps: list[StepRecord]
    logits: list[torch.Tensor] | None = None  # per request [output_len, vocab], when recorded

    @property
    def tokens(self) -> list[list[int]]:
        return [list(r.tokens) for r in self.requests]


def trace_prompts(input_lens: list[int], vocab_size: int, seed: int = 0) -> list[list[int]]:
    """Seeded prompt tokens of each request's length (the same lengths and seed give the same tokens)."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab_size, (n,), generator=gen).tolist() for n in input_lens]


@torch.inference_mode()
def serve(engine: Engine, arrivals: list[float], prompts: list[list[int]], output_lens: list[int],
          clock: Clock | None = None, record_logits: bool = False) -> Served:
    """Serve requests (arrivals sorted, seconds from the start) with continuous batching; greedy tokens."""
    clock = clock or WallClock()
    longest = max(len(p) + o for p, o in zip(prompts, output_lens))
    if longest > engine.max_model_len:
        raise AttnbenchError(f"a request of {longest} tokens does not fit an engine made for {engine.max_model_len}")
    engine.cache.reset()
    seqs = [Sequence(i, list(p), len(p), o) for i, (p, o) in enumerate(zip(prompts, output_lens))]
    times: list[list[float]] = [[] for _ in seqs]
    record = _logit_rows(engine, output_lens) if record_logits else None
    pending, waiting, running = deque(seqs), deque(), []
    records, events = [], []
    if engine.cuda:
        torch.cuda.synchronize(engine.device)
    start, now = clock.now(), 0.0
    while pending or waiting or running:
        while pending and arrivals[pending[0].index] <= now:
            waiting.append(pending.popleft())
        while waiting and len(running) < engine.max_num_seqs:
            running.append(waiting.popleft())
        if not running:  # idle: wait for the next arrival, not past it
            clock.wait_until(start + arrivals[pending[0].index])
            now = clock.now() - start
            continue
        sampled, logits = engine.run_step(schedule(running, engine.token_budget), records, events)
        now = clock.now() - start
        for seq in sampled:
            times[seq.index].append(now)
        if record is not None:
            rows, offsets = record
            at = torch.tensor([offsets[s.index] + s.num_outputs - 1 for s in sampled], dtype=torch.long,
                              device=engine.device)  # long even when no row was sampled (a step of chunks only)
            rows.index_copy_(0, at, logits.to(rows.dtype))
        running = [s for s in running if not s.finished]
    finish_records(records, events)
    served = [ServedRequest(arrivals[s.index], s.prompt_len, tuple(times[s.index]), tuple(s.tokens[s.prompt_len:]))
              for s in seqs]
    logits = None if record is None else [record[0][o:o + n] for o, n in zip(record[1], output_lens)]
    return Served(served, now, records, logits)


def _logit_rows(engine: Engine, output_lens: list[int]) -> tuple[torch.Tensor, list[int]]:
    """One logits row per generated token of every request ([sum(output_lens), vocab]), and where
    each request's rows start."""
    offsets = [0]
    for n in output_lens[:-1]:
        offsets.append(offsets[-1] + n)
    rows = torch.empty((sum(output_lens), engine.model.args.vocab_size), dtype=engine.model.tok_embeddings.dtype,
                       device=engine.device)
    return rows, offsets
