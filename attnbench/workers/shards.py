"""Which points of a sweep a shard measures, and in what order a device pool deals them out.

Why a rule of its own: `--shard I/N` runs (a Slurm array, Kubernetes jobs), torchrun ranks and
`attnbench merge` must agree on the split without talking to each other. Every shard computes
it from the plan alone (the points, never the machine), so the shards of one plan are disjoint
and together are the whole plan, whichever machine runs which; torchrun rank r of W measures
exactly what `--shard r/W` would, so a rank that failed can be run again as a shard and merged.

The split is by estimated cost: points sorted from the largest (KV cache plus q bytes, a proxy
for the reference's work and the inputs' allocation; plan order breaks ties), then dealt
0, 1, ..., N-1, N-1, ..., 0, 0, 1, ... (a snake), so the shards' point counts differ by at most
one and no shard gets all the large ones. On a GPU most of a point's time is its fixed sampling
budget, so equal counts matter most; the snake keeps the sizes even as well. A shard runs its
points in plan order.
"""

from __future__ import annotations

import re

from attnbench.errors import UsageError
from attnbench.kernels.inputs import input_bytes
from attnbench.kernels.workload import SweepPoint

MAX_SHARDS = 1 << 16


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """`I/N` -> (I, N) with 0 <= I < N; None (the flag not given) for no sharding. A blank value is
    refused like any other bad one: taken as "no sharding", a run would measure every point."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not m:
        raise UsageError(f"--shard: expected I/N (shard I of N, counted from 0), e.g. --shard 0/4, got {text!r}")
    index, count = int(m.group(1)), int(m.group(2))
    if not 1 <= count <= MAX_SHARDS:
        raise UsageError(f"--shard: N must be from 1 to {MAX_SHARDS}, got {text!r}")
    if index >= count:
        raise UsageError(f"--shard: I counts from 0 and must be below N (0..{count - 1} for /{count}), got {text!r}")
    return index, count


def by_cost(points: list[SweepPoint]) -> list[SweepPoint]:
    """Largest estimated cost first; plan order among equals (a stable sort)."""
    return sorted(points, key=input_bytes, reverse=True)


def shard_of(position: int, count: int) -> int:
    """The shard that the `position`-th costliest point goes to: a snake over the shards."""
    lap, offset = divmod(position, count)
    return offset if lap % 2 == 0 else count - 1 - offset


def shard_points(points: tuple[SweepPoint, ...], index: int, count: int) -> tuple[SweepPoint, ...]:
    """Shard `index` of `count`: its points, in plan order."""
    order = sorted(range(len(points)), key=lambda i: input_bytes(points[i]), reverse=True)
    mine = sorted(i for position, i in enumerate(order) if shard_of(position, count) == index)
    return tuple(points[i] for i in mine)
