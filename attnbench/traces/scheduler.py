"""A scheduler simulation in the manner of vLLM V1: a request trace in, the engine's steps out.

Why: the batch mix of a serving engine comes from its scheduler, not from the requests alone. Each
step has a token budget (`max_num_batched_tokens`). Running requests that decode are scheduled
first, one token each (1 + drafts with speculative decoding, every draft accepted); then running
requests whose prompt is part done; then waiting requests in arrival order while fewer than
`max_num_seqs` run. A prompt takes at most `chunk_size` tokens a step (vLLM's
long_prefill_token_threshold; 0: no cap) and what budget is left, so a long prompt is chunked. A
prompt's cached prefix (`prefix_len`, rounded down to whole blocks, as vLLM caches full blocks, and
short of the last token, which is always computed) is a prefix-cache hit. The step that computes a
prompt's last token samples its first output token.

Time: every step takes `step_ms` (a modelling assumption, not a measurement: nothing is timed here);
a request joins the waiting queue once the clock passes its arrival; an idle engine jumps to the
next arrival. Not modelled: KV-cache capacity and preemption, rejected drafts, and several
partial prefills' own limit (vLLM's max_num_partial_prefills). Deterministic: no randomness at all.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass

from attnbench.errors import UsageError
from attnbench.kernels.workload import MAX_BLOCK_SIZE, MAX_TOKENS
from attnbench.traces.requests import TimedRequest
from attnbench.traces.steps import MAX_REQUESTS, Request, TraceStep, check_rows

MAX_STEPS = 10_000_000


@dataclass(frozen=True)
class SchedulerConfig:
    """The simulation's parameters, named like the flags (and like vLLM's where it has one)."""

    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 128
    chunk_size: int = 512
    num_draft_tokens: int = 0
    step_ms: float = 20.0
    block_size: int = 16
    max_steps: int = 100_000

    def __post_init__(self) -> None:
        checks = [
            (1 <= self.max_num_batched_tokens <= MAX_TOKENS, "--max-num-batched-tokens", f"between 1 and {MAX_TOKENS}"),
            (1 <= self.max_num_seqs <= MAX_REQUESTS, "--max-num-seqs", f"between 1 and {MAX_REQUESTS}"),
            (0 <= self.chunk_size <= MAX_TOKENS, "--chunk-size", f"between 0 (no cap) and {MAX_TOKENS}"),
            (0 <= self.num_draft_tokens < self.max_num_batched_tokens, "--num-draft-tokens",
             "at least 0 and below --max-num-batched-tokens (a verify row of 1 + drafts must fit a step)"),
            (math.isfinite(self.step_ms) and 0 < self.step_ms <= 3.6e6, "--step-ms", "above 0 and at most an hour"),
            (1 <= self.block_size <= MAX_BLOCK_SIZE, "--block-size", f"between 1 and {MAX_BLOCK_SIZE}"),
            (1 <= self.max_steps <= MAX_STEPS, "--max-steps", f"between 1 and {MAX_STEPS}"),
        ]
        for ok, flag, need in checks:
            if not ok:
                raise UsageError(f"{flag}: must be {need}, got {getattr(self, flag[2:].replace('-', '_'))}")

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Running:
    """A request the engine holds: its KV tokens computed so far, tokens generated, cache hit."""

    request: TimedRequest
    computed: int
    hit: int
    generated: int = 0

    @property
    def prefilling(self) -> bool:
        return self.computed < self.request.input_len


@dataclass(frozen=True)
class Simulation:
    steps: tuple[TraceStep, ...]
    finished: int
    unfinished: int  # left when max_steps ended the simulation
    seconds: float  # the simulated clock at the end


def _admit(req: TimedRequest, block_size: int) -> Running:
    hit = min(req.prefix_len, req.input_len - 1) // block_size * block_size
    return Running(req, computed=hit, hit=hit)


def _plan(running: list[Running], waiting: deque, config: SchedulerConfig) -> list[tuple[Running, int, int]]:
    """(request, new tokens, drafts) rows of one step: decodes, then part-done prompts, then new ones."""
    budget, rows = config.max_num_batched_tokens, []
    for seq in running:
        if not seq.prefilling and budget > 0:
            drafts = min(config.num_draft_tokens, seq.request.output_len - seq.generated - 1, budget - 1)
            rows.append((seq, 1 + drafts, drafts))
            budget -= 1 + drafts
    cap = config.chunk_size or MAX_TOKENS
    for seq in running:
        if seq.prefilling and budget > 0:
            rows.append((seq, min(seq.request.input_len - seq.computed, cap, budget), 0))
            budget -= rows[-1][1]
    while waiting and len(running) < config.max_num_seqs and budget > 0:
        seq = _admit(waiting.popleft(), config.block_size)
        running.append(seq)
        rows.append((seq, min(seq.request.input_len - seq.computed, cap, budget), 0))
        budget -= rows[-1][1]
    return rows


def _row(seq: Running, new: int, drafts: int) -> Request:
    if not seq.prefilling:
        return Request(new, seq.computed + new, num_draft_tokens=drafts)
    whole = seq.request.input_len - seq.hit
    return Request(new, seq.computed + new, chunked=new < whole, prefix_hit=seq.hit)


def _advance(seq: Running, new: int) -> None:
    """After the step: the new tokens are cached; a finished prompt or a decode yields tokens."""
    was_prefilling = seq.prefilling
    seq.computed += new
    if not was_prefilling:
        seq.generated += new  # the input token's successor plus every accepted draft
    elif not seq.prefilling:
        seq.generated = 1


def simulate(requests: list[TimedRequest], config: SchedulerConfig) -> Simulation:
    """Schedule `requests` (in arrival order) step by step until all finish or max_steps."""
    pending = deque(sorted(requests, key=lambda r: r.arrival))
    waiting: deque = deque()
    running: list[Running] = []
    steps, finished, clock, rows_total = [], 0, 0.0, 0
    while (pending or waiting or running) and len(steps) < config.max_steps:
        while pending and pending[0].arrival <= clock:
            waiting.append(pending.popleft())
        if not waiting and not running:
            clock = pending[0].arrival
            continue
        rows = _plan(running, waiting, config)
        rows_total += len(rows)
        check_rows(rows_total, f"--max-steps: after {len(steps)} steps the simulation")
        steps.append(TraceStep(tuple(_row(seq, new, drafts) for seq, new, drafts in rows)))
        for seq, new, _ in rows:
            _advance(seq, new)
        done = [seq for seq in running if seq.generated >= seq.request.output_len]
        finished += len(done)
        running = [seq for seq in running if seq.generated < seq.request.output_len]
        clock += config.step_ms / 1000
    return Simulation(tuple(steps), finished, len(pending) + len(waiting) + len(running), round(clock, 6))
