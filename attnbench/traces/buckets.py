"""Steps that time alike, grouped: a replay times a few batches per bucket, not one per step.

Why: a 10,000-step trace timed step by step is hours of checking and timing; most of its steps are
near-copies of each other (a decode step of 100 rows on 80,000 KV tokens times like one of 110 rows
on 85,000). The rule: a step's bucket is its kind (decode, prefill, mixed) and the log-spaced bins
(ratio `ratio`, 2 by default: 1, 2-3, 4-7, ...) of three numbers an attention kernel's time follows:
its decode rows, its query tokens and its total KV tokens.

Which steps a bucket is timed on, and what each weighs: a few of its steps (`representatives`), with
weights that add up to its step count and reproduce its sums of every WORK size (decode rows, query
tokens, KV tokens, attended (query, key) pairs, the longest KV length) and of each one's square
(`moments`). A kernel's time that is quadratic in those sizes, without cross terms, within the
bucket is then summed exactly (sum over steps of a + b.x + c.x^2 = sum over representatives of
w (a + b.x + c.x^2)); one median step, as before, was biased low when the sizes are skewed within a
bin (median below mean). Sums alone (no squares) were exact for an affine time only, and the
reduction keeps the bucket's extreme steps (it zeroes weights among the farthest from the mean,
and the ones that survive those moves are far out): on a convex time they read high (the H200's
split strategies did, docs/measurements/h200/replay.md, the replay section). The longest KV length
is there because a split kernel's time follows it (its splits and its longest row). How far the
estimate is from timing each step is measured, not assumed: `sample_steps` draws the steps a
replay also times one by one (results/replay.py compares the two).

Why large buckets are split (`split`): a kernel's time is affine in those sizes only roughly; each
step also has a residual of its own (how its requests' lengths fall into the kernel's tiles and
splits: a few % per step). Five representatives standing for thousands of steps carry their five
residuals into the total at full weight, so a bucket holding half a trace was off by several %
(docs/measurements/h200/replay.md, the replay section's re-analysis). A bucket of more than 1/`split` of
the trace's steps (and more than MIN_PIECE) is cut into near-equal pieces along its most spread
work size, again and again (a k-d split), and each piece gets its own representatives: the points
go where the steps are, and the pieces stay compact in every size.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from attnbench.errors import UsageError
from attnbench.kernels.roofline import attended_pairs
from attnbench.kernels.workload import MAX_SEED
from attnbench.traces.steps import Trace, TraceStep

DEFAULT_RATIO = 2.0
MAX_RATIO = 1024.0
DEFAULT_SPLIT = 12  # no bucket holds more than 1/12 of the trace's steps (unless it is at most MIN_PIECE)
MAX_SPLIT = 4096
MIN_PIECE = 64  # a piece this small gains little from being cut again, and a short trace stays whole
SIZES = ("decode rows", "query tokens", "kv tokens")  # what the bins are of, in a bucket's key
WORK = (*SIZES, "attended pairs", "longest kv")  # what a bucket's representatives reproduce the sums (and squares) of


def sizes(step: TraceStep) -> tuple[int, int, int]:
    """(decode rows, query tokens, total KV tokens) of a step."""
    return len(step.decode_rows()), step.num_tokens, sum(r.kv_len for r in step.requests)


def work(step: TraceStep) -> tuple[int, int, int, int, int]:
    """A step's sizes, its causal (query, key) pairs and its longest KV length: what its
    representatives' weights reproduce the sums of (with their squares, `moments`)."""
    tokens = kv = pairs = longest = 0
    for r in step.requests:  # one pass: a 10,000-step trace of a hundred rows a step is a million requests
        tokens, kv, pairs = tokens + r.query_len, kv + r.kv_len, pairs + attended_pairs(r.query_len, r.kv_len, True)
        longest = max(longest, r.kv_len)
    return len(step.decode_rows()), tokens, kv, pairs, longest


def moments(table: np.ndarray) -> np.ndarray:
    """Each WORK size and its square, by step: the columns whose sums a bucket's weights reproduce."""
    return np.hstack([table, table ** 2])


def check_ratio(ratio: float) -> float:
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 1.0 < ratio <= MAX_RATIO:
        raise UsageError(f"--bucket-ratio: must be a number above 1 and at most {MAX_RATIO:g} (each bin spans "
                         f"sizes within this factor), got {ratio}")
    return float(ratio)


def check_split(split: int) -> int:
    if isinstance(split, bool) or not isinstance(split, int) or not 1 <= split <= MAX_SPLIT:
        raise UsageError(f"--bucket-split: must be a whole number from 1 (no split) to {MAX_SPLIT} (no bucket holds "
                         f"more than this fraction of the steps), got {split}")
    return split


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
    """Steps of one kind whose sizes fall in the same bins; each of `representatives` is timed and
    stands for its weight in steps (the weights add up to the bucket's step count)."""

    index: int
    kind: str
    bins: tuple[int, int, int]
    steps: tuple[int, ...]
    representatives: tuple[int, ...]
    weights: tuple[float, ...]
    piece: tuple[int, int] = (1, 1)  # (i, of n): the i-th of the n pieces its bins' steps were split into

    def describe(self, ratio: float) -> str:
        ranges = []
        for name, b in zip(SIZES, self.bins):
            low, high = bin_range(b, ratio)
            ranges.append(f"{name} {low}" if low == high else f"{name} {low}-{high}")
        timed = ", ".join(f"{s} (x{w:.4g})" for s, w in zip(self.representatives, self.weights))
        piece = f" (piece {self.piece[0]} of {self.piece[1]})" if self.piece[1] > 1 else ""
        return f"bucket {self.index}: {self.kind}, {', '.join(ranges)}{piece}; {len(self.steps)} step(s), timed on " \
               f"step(s) {timed}"


def weigh(sizes_of: np.ndarray) -> tuple[list[int], list[float]]:
    """(rows, weights): at most one more row than there are sizes, with weights >= 0 that add up to
    the row count and whose weighted sums of every column are the columns' sums.

    Carathéodory's reduction: start from every row weighing 1 (which reproduces the sums), and while
    more rows are left than the columns' rank (with the count), move weight along a direction that
    changes no sum until one row's weight reaches 0. Each move takes the rows farthest from the mean;
    the rows kept are often among them (a move zeroes one of the far rows and gives the others more
    weight), which is why the squares are among the sums (`moments`)."""
    count = len(sizes_of)
    mean = sizes_of.mean(axis=0)
    centred = (sizes_of - mean) / np.where(mean > 0, mean, 1.0)
    sums = np.vstack([np.ones(count), centred.T])  # what must not change: the count and each centred size
    rank = int(np.linalg.matrix_rank(sums, tol=1e-9 * math.sqrt(count)))
    alive = [int(i) for i in np.argsort(-(centred ** 2).sum(axis=1), kind="stable")]  # farthest first
    weights = np.ones(count)
    while len(alive) > rank:
        moving = np.array(alive[:rank + 1])
        direction = np.linalg.svd(sums[:, moving])[2][-1]  # sums[:, moving] @ direction == 0
        direction = direction if direction.max() > 0 else -direction
        up = np.flatnonzero(direction > 1e-12)
        step = weights[moving[up]] / direction[up]
        weights[moving] -= step.min() * direction
        weights[moving[up[np.argmin(step)]]] = 0.0
        spent = moving[weights[moving] < 1e-12 * count]
        weights[spent] = 0.0
        alive = [i for i in alive[:rank + 1] if weights[i] > 0] + alive[rank + 1:]
    kept = [int(i) for i in np.flatnonzero(weights)]
    return kept, [float(w) for w in weights[kept] * count / weights[kept].sum()]


def split_steps(members: list[int], measured: np.ndarray, pieces: int) -> list[list[int]]:
    """`members` cut into `pieces` near-equal parts: sorted along the work size of largest relative
    spread (ties by step), cut at the share of the first half of the pieces, each half cut again."""
    if pieces <= 1:
        return [members]
    values = measured[members]
    mean = values.mean(axis=0)
    spread = values.std(axis=0) / np.where(mean > 0, mean, 1.0)
    along = values[:, int(np.argmax(spread))]
    ordered = [members[i] for i in np.lexsort((np.array(members), along))]
    first = pieces // 2
    cut = round(len(members) * first / pieces)
    return split_steps(ordered[:cut], measured, first) + split_steps(ordered[cut:], measured, pieces - first)


def bucket_steps(trace: Trace, ratio: float = DEFAULT_RATIO, split: int = DEFAULT_SPLIT) -> list[StepBucket]:
    """Every step in one bucket, with its representatives; a bucket of more than 1/`split` of the
    steps (and more than MIN_PIECE) cut into pieces; buckets numbered in the order their first step comes."""
    ratio, split = check_ratio(ratio), check_split(split)
    groups: dict[tuple, list[int]] = {}
    measured = [work(step) for step in trace.steps]
    for i, step in enumerate(trace.steps):
        groups.setdefault((step.kind, *(bin_of(v, ratio) for v in measured[i][:3])), []).append(i)
    limit = max(MIN_PIECE, math.ceil(len(trace.steps) / split))
    table = np.array(measured, dtype=float).reshape(len(measured), len(WORK))
    pieces = []
    for key, members in groups.items():
        parts = split_steps(members, table, math.ceil(len(members) / limit))
        pieces += [(key, sorted(part), (i + 1, len(parts))) for i, part in enumerate(parts)]
    buckets = []
    for index, (key, members, piece) in enumerate(sorted(pieces, key=lambda p: p[1][0])):
        kept, weights = weigh(moments(table[members]))
        buckets.append(StepBucket(index, key[0], key[1:], tuple(members), tuple(members[k] for k in kept),
                                  tuple(weights), piece))  # kept ascends, so the representatives stay in trace order
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
