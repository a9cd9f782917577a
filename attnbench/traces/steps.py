"""The step trace, attnbench's own format: one engine step per record, each with its requests.

Why its own format: no tool links the decode and the prefill work of one step to a workload (vLLM's
per-iteration logs carry aggregates, flashinfer-bench one kernel call per line). A `Request` row is
what the attention kernels see of one sequence in one step, in the words `Batch` uses: `query_len`
new tokens, `kv_len` keys attended to (cached plus new), `num_draft_tokens` speculative tokens among
the query tokens, `chunked` (a chunk of a longer prefill), `prefix_hit` (tokens of kv_len that a
prefix cache served). jsonl.py reads and writes it; docs/guides/traces.md documents it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields

from attnbench.errors import UsageError
from attnbench.kernels.workload import (DTYPE_ALIASES, DTYPES, MAX_BLOCK_SIZE, MAX_CONTEXT, MAX_HEAD_DIM,
                                        MAX_HEADS, MAX_TOKENS, Batch)

FORMAT = "attnbench-step-trace"
# raised when a reader of this version would misread a newer file; version 2 added a step's
# `synthesized` marker (jsonl.py reads version 1 files as before)
VERSION = 2
STEP_KINDS = ("decode", "prefill", "mixed")
MAX_REQUESTS = 1 << 16  # requests of one step: far past any engine's max_num_seqs
# request rows of one trace: each takes about 120 bytes of memory once read, so this bounds a trace
# at about half a gigabyte (a 10,000-step trace of 128 requests a step holds 1.28 million)
MAX_TRACE_ROWS = 4_000_000


class FieldError(UsageError):
    """A value of a trace is wrong; the message starts with the field's name. Readers add the file
    and the line (jsonl.py), or the flag, in front."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{name}: {message}")


def check_rows(total: int, where: str) -> None:
    """Refuse a trace of more than MAX_TRACE_ROWS request rows, as it is being read or built."""
    if total > MAX_TRACE_ROWS:
        raise UsageError(f"{where}: more than {MAX_TRACE_ROWS} request rows in one trace (about half a "
                         "gigabyte of memory); split it into several traces")


def count(value, name: str, low: int, high: int):
    """An integer in [low, high] (a bool is not one), or a FieldError naming `name`."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise FieldError(name, f"expected an integer, got {value!r}")
    if not low <= value <= high:
        shown = value if abs(value) < 10**15 else f"an integer of {len(str(abs(value)))} digits"  # JSON has no cap
        raise FieldError(name, f"must be between {low} and {high}, got {shown}")
    return value


def flag(value, name: str) -> bool:
    if not isinstance(value, bool):
        raise FieldError(name, f"expected true or false, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Request:
    """One sequence of one step. `kv_len` includes the `query_len` new tokens; `num_draft_tokens`
    of the query tokens are speculative (a verify row has 1 + drafts); `prefix_hit` of the cached
    `kv_len - query_len` tokens came from a prefix cache rather than this request's own steps."""

    query_len: int
    kv_len: int
    num_draft_tokens: int = 0
    chunked: bool = False
    prefix_hit: int = 0

    def __post_init__(self) -> None:
        count(self.query_len, "query_len", 1, MAX_TOKENS)
        count(self.kv_len, "kv_len", 1, MAX_CONTEXT)
        if self.kv_len < self.query_len:
            raise FieldError("kv_len", f"must be at least query_len ({self.query_len}): it counts the new "
                             f"tokens too, got {self.kv_len}")
        count(self.num_draft_tokens, "num_draft_tokens", 0, self.query_len - 1)
        flag(self.chunked, "chunked")
        count(self.prefix_hit, "prefix_hit", 0, self.kv_len - self.query_len)

    @property
    def decode_role(self) -> bool:
        """A decode or a speculative verify row: one token plus its drafts, not part of a prefill."""
        return not self.chunked and self.query_len == 1 + self.num_draft_tokens


OPTIONAL = {f.name: f.default for f in fields(Request) if f.name not in ("query_len", "kv_len")}


@dataclass(frozen=True)
class TraceStep:
    """One engine step: its requests in the engine's order (`batch` puts decode rows first).
    `synthesized`: the step's counts were read (an aggregate log line) but its per-request lengths
    were drawn from stated distributions (step_logs.py), so a row is not a request that ran."""

    requests: tuple[Request, ...]
    synthesized: bool = False

    def __post_init__(self) -> None:
        if not 1 <= len(self.requests) <= MAX_REQUESTS:
            raise FieldError("query_len", f"a step holds 1 to {MAX_REQUESTS} requests, got {len(self.requests)}")
        flag(self.synthesized, "synthesized")

    @property
    def num_tokens(self) -> int:
        return sum(r.query_len for r in self.requests)

    def decode_rows(self) -> list[int]:
        """The rows the split strategy sends to the decode kernel: decode-role rows of the step's
        smallest decode query length (the kernel takes one query length; vLLM's reorder threshold
        also sends its shortest rows there). The other rows go to the varlen kernel."""
        lens = [r.query_len for r in self.requests if r.decode_role]
        low = min(lens, default=0)  # once: a step of a hundred rows is read ten thousand times in a replay
        return [i for i, r in enumerate(self.requests) if r.decode_role and r.query_len == low]

    @property
    def kind(self) -> str:
        decode = len(self.decode_rows())
        return "decode" if decode == len(self.requests) else ("prefill" if decode == 0 else "mixed")

    def batch(self, rule: str = "") -> Batch:
        """The step as the kernels' Batch: decode rows first, as metadata.split_batch expects."""
        decode = self.decode_rows()
        order = decode + sorted(set(range(len(self.requests))) - set(decode))
        return Batch(query_lens=tuple(self.requests[i].query_len for i in order),
                     kv_lens=tuple(self.requests[i].kv_len for i in order),
                     is_decode=tuple([True] * len(decode) + [False] * (len(order) - len(decode))), rule=rule)


@dataclass(frozen=True)
class Shape:
    """The model's attention shape, when the source knows it (a request trace does not)."""

    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    dtype: str | None = None
    block_size: int | None = None

    def __post_init__(self) -> None:
        for name, high in (("num_heads", MAX_HEADS), ("num_kv_heads", MAX_HEADS), ("head_dim", MAX_HEAD_DIM),
                           ("block_size", MAX_BLOCK_SIZE)):
            if getattr(self, name) is not None:
                count(getattr(self, name), f"shape.{name}", 1, high)
        if self.num_heads and self.num_kv_heads and self.num_heads % self.num_kv_heads:
            raise FieldError("shape.num_kv_heads", f"{self.num_heads} heads are not divisible by "
                             f"{self.num_kv_heads} kv heads")
        if self.dtype is not None:
            if DTYPE_ALIASES.get(self.dtype) not in DTYPES:
                raise FieldError("shape.dtype", f"expected one of {', '.join(DTYPES)}, got {self.dtype!r}")
            object.__setattr__(self, "dtype", DTYPE_ALIASES[self.dtype])

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def over(self, base: Shape) -> Shape:
        """`base` with the fields this shape gives replacing its own (flags over a file's header)."""
        return Shape(**{**base.as_dict(), **self.as_dict()})


@dataclass(frozen=True)
class Header:
    """The first line of a trace file: what it is, where it came from, and how it was made.

    `source`: the input, in words (a file name, a spec string, `synthetic`); `synthesized`: the
    lengths were drawn from stated distributions rather than read; `generator`: the parameters of
    the generator and scheduler that made the steps (empty for steps read as they are)."""

    source: str
    shape: Shape = field(default_factory=Shape)
    synthesized: bool = False
    generator: dict = field(default_factory=dict)
    format: str = FORMAT
    version: int = field(default=VERSION, compare=False)  # the version a file was read as, not content


@dataclass(frozen=True)
class Trace:
    header: Header
    steps: tuple[TraceStep, ...]

    def kinds(self) -> Counter:
        return Counter(step.kind for step in self.steps)
