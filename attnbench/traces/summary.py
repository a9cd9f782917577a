"""What a step trace holds, in numbers: step kinds, and the distributions a kernel's time follows.

Why: before timing a trace, a user wants to see whether it is the workload they meant (how many
steps decode only, how long the prefill chunks, how long the contexts). `attnbench trace summary`
prints these rows as a table.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnbench.traces.steps import STEP_KINDS, Trace

QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class Distribution:
    """One quantity over the trace: what it is, how many values, and their spread."""

    name: str
    n: int
    mean: float
    low: int
    quantiles: tuple[int, ...]  # at QUANTILES, nearest rank
    high: int


def distribution(name: str, values: list[int]) -> Distribution:
    ordered = sorted(values)
    if not ordered:
        return Distribution(name, 0, 0.0, 0, tuple(0 for _ in QUANTILES), 0)
    ranks = [ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] for q in QUANTILES]
    return Distribution(name, len(ordered), sum(ordered) / len(ordered), ordered[0], tuple(ranks), ordered[-1])


def kind_counts(trace: Trace) -> dict[str, int]:
    counts = trace.kinds()
    return {kind: counts.get(kind, 0) for kind in STEP_KINDS}


def distributions(trace: Trace) -> list[Distribution]:
    """Per step: requests, query tokens, decode rows; per request row: query_len and kv_len by role."""
    steps = trace.steps
    decode_rows = [set(step.decode_rows()) for step in steps]
    decode = [r for step, rows in zip(steps, decode_rows) for i, r in enumerate(step.requests) if i in rows]
    other = [r for step, rows in zip(steps, decode_rows) for i, r in enumerate(step.requests) if i not in rows]
    return [
        distribution("requests per step", [len(s.requests) for s in steps]),
        distribution("query tokens per step", [s.num_tokens for s in steps]),
        distribution("decode rows per step", [len(rows) for rows in decode_rows]),
        distribution("kv_len of decode rows", [r.kv_len for r in decode]),
        distribution("query_len of prefill rows", [r.query_len for r in other]),
        distribution("kv_len of prefill rows", [r.kv_len for r in other]),
        distribution("chunk query_len (chunked rows)", [r.query_len for r in other if r.chunked]),
        distribution("prefix_hit of rows with a hit", [r.prefix_hit for r in other if r.prefix_hit]),
        distribution("num_draft_tokens of draft rows", [r.num_draft_tokens for r in decode + other
                                                        if r.num_draft_tokens]),
    ]
