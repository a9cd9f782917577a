"""Steps from an aggregate log's counts: the per-request lengths the log lacks, drawn and marked.

Why drawn, and how: a log line gives a step's totals (step_logs.py), but the kernels need each
request's query and KV length. Every count the line gives is kept exactly; only how a total is
shared out among the requests is drawn, from stated distributions and a seed:
- prefill rows: the line's new tokens and cached (prefix-hit) tokens are shared out in proportion
  to prompt lengths drawn from `input_len`, each row at least one new token; a row's KV length is
  its new plus its cached tokens (the log says nothing of earlier chunks of a chunked prefill).
- decode rows: the line's decode tokens are shared out evenly (a speculative row verifies
  1 + drafts tokens, the same number for each); KV lengths are drawn from `kv_len`, then, when the
  line gives the KV tokens in use (SGLang's `#token`), scaled so that they add up to it.
Every step built so is marked `synthesized`, and the header records the distributions and seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from attnbench.errors import UsageError
from attnbench.kernels.workload import MAX_CONTEXT, MAX_SEED
from attnbench.traces.files import where
from attnbench.traces.requests import LengthDist
from attnbench.traces.step_logs import LogRead, LogStep
from attnbench.traces.steps import FieldError, Header, Request, Shape, Trace, TraceStep, check_rows


@dataclass(frozen=True)
class LogLengths:
    """`trace convert --sglang-log/--vllm-log`: the distributions the missing lengths are drawn from."""

    input_len: LengthDist
    kv_len: LengthDist
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.seed <= MAX_SEED:
            raise UsageError(f"--seed: must be between 0 and 2**63 - 1, got {self.seed}")

    def as_dict(self) -> dict:
        return {"input_len": str(self.input_len), "kv_len": str(self.kv_len), "seed": self.seed}


def apportion(total: int, weights: list[int], low: list[int], high: list[int], name: str) -> list[int]:
    """`total` shared out as integers, row i within [low[i], high[i]], what is past the floors in
    proportion to `weights` (largest remainders first; exact integer arithmetic), then what a
    row's ceiling cut off handed to the rows with room."""
    spare, weight = total - sum(low), sum(weights)
    if spare < 0 or total > sum(high):
        raise FieldError(name, f"{total} cannot be shared among {len(weights)} requests within "
                         f"[{min(low)}, {max(high)}] each")
    shares = [low[i] + spare * w // weight for i, w in enumerate(weights)]
    left = total - sum(shares)
    for i in sorted(range(len(weights)), key=lambda i: -(spare * weights[i] % weight))[:left]:
        shares[i] += 1
    cut = sum(max(0, s - h) for s, h in zip(shares, high))
    shares = [min(s, h) for s, h in zip(shares, high)]
    while cut:
        room = [i for i in range(len(shares)) if shares[i] < high[i]]
        each = -(-cut // len(room))
        for i in room:
            give = min(each, high[i] - shares[i], cut)
            shares[i], cut = shares[i] + give, cut - give
    return shares


def decode_rows(step: LogStep, kv_len: LengthDist, rng: random.Random) -> list[Request]:
    n = step.decode_requests
    if not n:
        return []
    query = apportion(step.decode_tokens, [1] * n, [1] * n, [step.decode_tokens] * n, "decode tokens")
    drawn = [max(kv_len.draw(rng), q) for q in query]
    if step.kv_tokens is not None and step.kv_tokens >= sum(query):
        drawn = apportion(step.kv_tokens, drawn, query, [MAX_CONTEXT] * n, "#token")
    return [Request(q, kv, num_draft_tokens=q - 1) for q, kv in zip(query, drawn)]


def prefill_rows(step: LogStep, input_len: LengthDist, rng: random.Random) -> list[Request]:
    n = step.prefill_requests
    if not n:
        return []
    weights = [input_len.draw(rng) for _ in range(n)]
    query = apportion(step.prefill_tokens, weights, [1] * n, [step.prefill_tokens] * n, "new tokens")
    cached = apportion(step.cached_tokens, weights, [0] * n, [MAX_CONTEXT - q for q in query], "cached tokens")
    return [Request(q, q + c, prefix_hit=c) for q, c in zip(query, cached)]


def synthesized_step(step: LogStep, lengths: LogLengths, rng: random.Random) -> TraceStep:
    """One log step with drawn lengths: decode rows first, as the engine orders them."""
    return TraceStep(tuple(decode_rows(step, lengths.kv_len, rng) + prefill_rows(step, lengths.input_len, rng)),
                     synthesized=True)


def log_trace(read: LogRead, path: Path, engine: str, lengths: LogLengths, shape: Shape) -> Trace:
    """A log's steps as a step trace, every one marked synthesized; the header says which log,
    how many of its lines were steps, and how the lengths were drawn."""
    rng, steps, rows = random.Random(lengths.seed), [], 0
    for step in read.steps:
        try:
            steps.append(synthesized_step(step, lengths, rng))
        except FieldError as exc:
            raise UsageError(f"{where(path, step.line)}: {exc}") from None
        rows += len(steps[-1].requests)
        check_rows(rows, where(path, step.line))
    generator = {"log": {"engine": engine, "lines": read.lines, "steps": len(steps), "ignored_lines": read.ignored,
                         "empty_steps": read.empty},
                 "lengths": lengths.as_dict()}
    return Trace(Header(f"{engine} log {path}", shape, True, generator), tuple(steps))
