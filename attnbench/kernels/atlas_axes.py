"""The axes of an atlas (`attnbench atlas`): what a step is made of, and a cell's coordinates as a batch.

Why its own module: an atlas maps which backend x strategy wins over the shape of a step, and
every later piece (the refinement, the tables, the pictures, the rule's features) must read a
cell's coordinates the same way. A cell is one value per axis (AXES, in this order); its batch is
built by one documented rule (`cell_batch`): decode rows = round(tokens x decode_share), each
one query token on `decode_context` keys; the other query tokens in prefill chunks of at most
`chunk` tokens (split evenly), each on `prefill_context` cached keys; query heads fixed, KV heads
= heads / gqa_group. A cell is a GivenPoint, so a round of cells is a kernel sweep.

Each axis has its own scale: a size is log-spaced (and bisected at its geometric midpoint), the
decode share is linear; every value snaps to what a batch can hold (whole tokens, head dims in
steps of 8, GQA groups that divide the heads). Nothing here touches a device.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass

from attnbench.errors import UsageError
from attnbench.kernels.workload import MAX_CONTEXT, MAX_HEAD_DIM, MAX_HEADS, MAX_TOKENS, Batch, GivenPoint

TOLERANCE = 0.10  # a crossover is located once its bracket is within 10 % of its coordinate


@dataclass(frozen=True)
class Axis:
    """One axis: its name (a cells.csv column), flag, meaning, scale, bounds and resolution."""

    name: str
    flag: str
    meaning: str
    scale: str  # "log": sizes; "linear": a share
    low: float
    high: float
    step: float = 1  # values are multiples of it
    divides_heads: bool = False  # the GQA group: only divisors of the query heads
    offset: float = 0  # a log axis that holds 0 is spaced in log(value + offset)

    def snap(self, value: float, heads: int) -> float:
        """The nearest value a batch can hold, in the axis's own scale."""
        if self.divides_heads:
            return min((g for g in range(1, heads + 1) if heads % g == 0),
                       key=lambda g: (abs(self.position(g) - self.position(value)), g))
        snapped = round(value / self.step) * self.step
        snapped = min(max(snapped, self.low), self.high)
        return int(snapped) if float(self.step).is_integer() else round(snapped, 6)

    def position(self, value: float) -> float:
        return math.log(value + self.offset) if self.scale == "log" else float(value)

    def value_at(self, position: float) -> float:
        return math.exp(position) - self.offset if self.scale == "log" else position

    def spaced(self, low: float, high: float, count: int, heads: int) -> list:
        """`count` values from low to high, evenly spaced in the axis's scale, snapped, once each."""
        if count == 1 or low == high:
            return [self.snap(low, heads)]
        a, b = self.position(low), self.position(high)
        return sorted({self.snap(self.value_at(a + (b - a) * i / (count - 1)), heads) for i in range(count)})

    def midpoint(self, low: float, high: float, heads: int) -> float:
        return self.snap(self.value_at((self.position(low) + self.position(high)) / 2), heads)

    def located(self, low: float, high: float) -> bool:
        """Within TOLERANCE of the coordinate (the bracket's middle)."""
        return high - low <= TOLERANCE * (low + high) / 2


AXES = (
    Axis("decode_share", "--decode-share", "decode rows over the step's query tokens", "linear", 0.0, 1.0, 0.01),
    Axis("decode_context", "--decode-context", "KV tokens of each decode row", "log", 1, MAX_CONTEXT),
    Axis("chunk", "--chunk", "query tokens of a prefill chunk (at most)", "log", 1, MAX_TOKENS),
    Axis("prefill_context", "--prefill-context", "cached KV tokens before each prefill chunk", "log", 0, MAX_CONTEXT,
         offset=1),
    Axis("gqa_group", "--gqa-group", "query heads per KV head (heads / kv heads)", "log", 1, MAX_HEADS,
         divides_heads=True),
    Axis("head_dim", "--head-dim", "head dim", "log", 8, 256, 8),
    Axis("tokens", "--tokens", "query tokens of the step", "log", 1, MAX_TOKENS),
)
NAMES = tuple(a.name for a in AXES)
BY_NAME = {a.name: a for a in AXES}
Coord = tuple  # one value per axis, in AXES order

# llama-3-8b's 32/8x128 on an H200: the decode share, the decode context and the step's tokens vary;
# the CPU's reference backend gets a small map of the same shape (it must finish in seconds)
GPU_DEFAULTS = {"decode_share": "0:1:5", "decode_context": "256:16384:4", "chunk": "512", "prefill_context": "0",
                "gqa_group": "4", "head_dim": "128", "tokens": "64:2048:4"}
CPU_DEFAULTS = {"decode_share": "0:1:3", "decode_context": "16:128:2", "chunk": "32", "prefill_context": "0",
                "gqa_group": "4", "head_dim": "32", "tokens": "8:32:2"}
DEFAULT_COUNT = 4  # coarse values of an axis given as LOW:HIGH
MAX_COUNT = 64


@dataclass(frozen=True)
class Range:
    """An axis as the flags give it: one value (fixed), or LOW:HIGH with `count` coarse values."""

    low: float
    high: float
    count: int

    @property
    def varies(self) -> bool:
        return self.low != self.high


def parse_range(axis: Axis, text: str) -> Range:
    """VALUE, LOW:HIGH or LOW:HIGH:COUNT; refused naming the flag."""
    parts = str(text).strip().split(":")
    if len(parts) not in (1, 2, 3):
        raise UsageError(f"{axis.flag}: expected VALUE, LOW:HIGH or LOW:HIGH:COUNT, got {text!r}")
    try:
        low, high = float(parts[0]), float(parts[1] if len(parts) > 1 else parts[0])
        count = int(parts[2]) if len(parts) == 3 else (DEFAULT_COUNT if low != high else 1)
    except ValueError:
        raise UsageError(f"{axis.flag}: expected numbers (VALUE, LOW:HIGH or LOW:HIGH:COUNT), got {text!r}") from None
    if not (math.isfinite(low) and math.isfinite(high)) or not axis.low <= low <= high <= axis.high:
        raise UsageError(f"{axis.flag}: need {axis.low:g} <= LOW <= HIGH <= {axis.high:g}, got {text!r}")
    if not 1 <= count <= MAX_COUNT or (low == high and count != 1) or (low != high and count < 2):
        raise UsageError(f"{axis.flag}: COUNT must be 2-{MAX_COUNT} for a range (1 for a value), got {text!r}")
    return Range(low, high, count)


@dataclass(frozen=True)
class CellShape:
    """What every cell shares: query heads, dtype, KV block size."""

    heads: int
    dtype: str
    block_size: int


@functools.lru_cache(maxsize=4096)
def cell_batch(coord: Coord) -> Batch:
    """The step a cell stands for (the module docstring's rule); decode rows first."""
    c = dict(zip(NAMES, coord))
    tokens = int(c["tokens"])
    decode = min(tokens, round(tokens * c["decode_share"]))
    prefill = tokens - decode
    chunks = math.ceil(prefill / c["chunk"]) if prefill else 0
    prefill_q = [prefill // chunks + (1 if i < prefill % chunks else 0) for i in range(chunks)]
    query = [1] * decode + prefill_q
    kv = [int(c["decode_context"])] * decode + [q + int(c["prefill_context"]) for q in prefill_q]
    rule = (f"atlas: {decode} decode rows on {c['decode_context']} keys, {prefill} prefill tokens in {chunks} "
            f"chunk(s) of <= {c['chunk']} on {c['prefill_context']} cached keys")
    return Batch(tuple(query), tuple(kv), tuple([True] * decode + [False] * chunks), rule)


def step_of(coord: Coord) -> tuple:
    """What a cell's kernels compute: its batch's lengths, GQA group and head dim. A decode-only step
    does not read the prefill axes, a prefill-only one the decode context, so cells that differ
    only there are one step: measured once (runs/atlas_shared.py), and no crossover between them."""
    c = dict(zip(NAMES, coord))
    return cell_batch(coord), c["gqa_group"], c["head_dim"]


def same_step(one: Coord, two: Coord) -> bool:
    """Whether two cells are the same step: a winner that differs between them is noise, not a crossover."""
    return step_of(one) == step_of(two)


def cell_id(coord: Coord) -> int:
    """A stable number for a cell (its point's seed): the same coordinates, the same resume key."""
    return int(hashlib.sha256(repr(tuple(float(v) for v in coord)).encode()).hexdigest()[:15], 16)


def cell_point(coord: Coord, shape: CellShape) -> GivenPoint:
    batch = cell_batch(coord)
    c = dict(zip(NAMES, coord))
    decode, tokens = batch.num_decode_seqs, batch.num_tokens
    kind = "decode" if decode == tokens else "prefill" if decode == 0 else "mixed"
    return GivenPoint(kind=kind, num_tokens=tokens, num_heads=shape.heads, head_dim=int(c["head_dim"]),
                      num_kv_heads=shape.heads // int(c["gqa_group"]), dtype=shape.dtype,
                      block_size=shape.block_size, context=str(max(batch.kv_lens)),
                      decode_share=decode / tokens if kind == "mixed" else 0.5, prefill_len=int(c["chunk"]),
                      seed=cell_id(coord), given=batch)
