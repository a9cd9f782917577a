"""Steps that time alike, grouped: a replay times one batch per bucket, not one per step.

Why: a 10,000-step trace timed step by step is hours of checking and timing; most of its steps are
near-copies of each other (a decode step of 100 rows on 80,000 KV tokens times like one of 110 rows
on 85,000). The rule: a step's bucket is its kind (decode, prefill, mixed) and the log-spaced bins
(ratio `ratio`, 2 by default: 1, 2-3, 4-7, ...) of three numbers an attention kernel's time follows:
its decode rows, its query tokens and its total KV tokens. A bucket is timed on its representative,
the median step by total KV tokens (then query tokens, then position), and weighed by its step
count. How far that is from timing each step is measured, not assumed: `sample_steps` draws the
steps a replay also times one by one (results/replay.py compares the two).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from attnbench.errors import UsageError
from attnbench.kernels.workload import MAX_SEED
from attnbench.traces.steps import Trace, TraceStep

DEFAULT_RATIO = 2.0
MAX_RATIO = 1024.0
SIZES = ("decode rows", "query tokens", "kv tokens")  # what the bins are of, in a bucket's key


def sizes(step: TraceStep) -> tuple[int, int, int]:
    """(decode rows, query tokens, total KV tokens) of a step."""
    return len(step.decode_rows()), step.num_tokens, sum(r.kv_len for r in step.requests)


def check_ratio(ratio: float) -> float:
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 1.0 < ratio <= MAX_RATIO:
        raise UsageError(f"--bucket-ratio: must be a number above 1 and at most {MAX_RATIO:g} (each bin spans "
                         f"sizes within this factor), got {ratio}")
    return float(ratio)


def bin_of(value: int, ratio: float) -> int:
    """The log-spaced bin of `value`: b with ratio**b <= value < ratio**(b + 1); -1 for 0 (none)."""
    if value < 1:
        return -1
    b = int(math.floor(math.log(value) / math.log(ratio)))
    while ratio ** (b + 1) <= value:  # the float log may land one off at an edge
        b += 1
    while b > 0 and ratio ** b > value:
        b -= 1
    return b


def bin_range(b: int, ratio: float) -> tuple[int, int]:
    """The integers of bin `b`: (low, high), both included."""
    if b < 0:
        return 0, 0
    return math.ceil(ratio ** b), math.ceil(ratio ** (b + 1)) - 1


@dataclass(frozen=True)
class StepBucket:
    """Steps of one kind whose sizes fall in the same bins; `representative` is the step timed."""

    index: int
    kind: str
    bins: tuple[int, int, int]
    steps: tuple[int, ...]
    representative: int

    def describe(self, ratio: float) -> str:
        ranges = []
        for name, b in zip(SIZES, self.bins):
            low, high = bin_range(b, ratio)
            ranges.append(f"{name} {low}" if low == high else f"{name} {low}-{high}")
        return f"bucket {self.index}: {self.kind}, {', '.join(ranges)}; {len(self.steps)} step(s), " \
               f"timed on step {self.representative} (the median by kv tokens)"


def bucket_steps(trace: Trace, ratio: float = DEFAULT_RATIO) -> list[StepBucket]:
    """Every step in one bucket; buckets numbered in the order their first step comes."""
    ratio = check_ratio(ratio)
    groups: dict[tuple, list[int]] = {}
    measured = [sizes(step) for step in trace.steps]
    for i, step in enumerate(trace.steps):
        groups.setdefault((step.kind, *(bin_of(v, ratio) for v in measured[i])), []).append(i)
    buckets = []
    for index, (key, members) in enumerate(groups.items()):
        ordered = sorted(members, key=lambda i: (measured[i][2], measured[i][1], i))
        buckets.append(StepBucket(index, key[0], key[1:], tuple(members), ordered[(len(ordered) - 1) // 2]))
    return buckets


def step_buckets(buckets: list[StepBucket], num_steps: int) -> list[int]:
    """Each step's bucket index, by step."""
    of = [0] * num_steps
    for bucket in buckets:
        for i in bucket.steps:
            of[i] = bucket.index
    return of


def sample_steps(num_steps: int, count: int, seed: int) -> tuple[int, ...]:
    """`count` distinct steps drawn with `seed` (all of them if the trace is shorter), in order."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise UsageError(f"--exact-sample: must be a whole number of steps, 0 or more, got {count}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise UsageError(f"--seed: must be between 0 and 2**63 - 1, got {seed}")
    return tuple(sorted(random.Random(seed).sample(range(num_steps), min(count, num_steps))))
