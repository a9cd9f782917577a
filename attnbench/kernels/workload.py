"""What one benchmark point is: a batch of sequences, each with query tokens and a KV context.

A `SweepPoint` is a frozen, picklable description; `build_batch(point)` turns it into concrete
sequence lengths by a documented, seeded rule, so the same point always means the same batch on
every machine. Nothing here touches a device.

Lengths: `query_len` is the number of new tokens a sequence brings in this step; `kv_len` is the
number of keys it attends to, its cached tokens plus the new ones (what FlashAttention calls
`seqused_k` / `cache_seqlens`). Causal masks are aligned bottom-right: query i of a sequence with
q new tokens sees keys 0 .. kv_len - q + i.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field

from attnbench.errors import UsageError

KINDS = ("decode", "prefill", "mixed", "prefix", "specdec")
# how a batch is sent to the kernels (kernels/backends/base.py); tables show them in this order and
# divide the others by unified: one varlen call / decode kernel + varlen / both parts in one launch (POD)
STRATEGIES = ("unified", "split", "fused")
DEFAULT_STRATEGIES = ("unified", "split")

# Upper bounds on sizes: far past any model or serving batch today, and low enough that a typo (a
# few zeros too many) is refused before a batch of a billion sequences is drawn or allocated.
MAX_TOKENS = 1 << 20  # query tokens of one batch (--tokens), and --prefill-len
MAX_CONTEXT = 1 << 22  # KV tokens of one sequence (--context)
MAX_HEADS = 1024  # --heads, --kv-heads
MAX_HEAD_DIM = 1024  # --dim
MAX_BLOCK_SIZE = 4096  # --block-size
MAX_SPEC_K = 1024  # --spec-k
MAX_SEED = 2**63 - 1  # --seed: torch generators take a 64-bit seed
DTYPES = ("bfloat16", "float16")
DTYPE_ALIASES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16"}

KIND_RULES = {
    "decode": "N sequences x 1 query token; kv lengths drawn from --context",
    "prefill": "N query tokens split evenly over ceil(N / prefill_len) sequences; no cached context",
    "mixed": "one prefill chunk of round(N * (1 - decode_share)) tokens on a cached prefix drawn "
    "from --context, plus N - chunk decode sequences (1 token, kv from --context); with --decode-seqs R, "
    "the chunk is all N tokens and R decode sequences sit beside it",
    "prefix": "prefill as above, each sequence on a cached prefix so that cached / kv = prefix_ratio",
    "specdec": "N // spec_k sequences x spec_k query tokens (N rounded down to a multiple of spec_k, "
    "at least one sequence); kv lengths drawn from --context",
}

# the SweepPoint fields each kind's rule reads, in the order the rule (and a benchmark's exported
# name, which must stay stable) names them; the other fields do not change its batch
KIND_SETTINGS = {"decode": ("context",), "specdec": ("spec_k", "context"), "prefill": ("prefill_len",),
                 "prefix": ("prefill_len", "prefix_ratio"), "mixed": ("decode_share", "decode_seqs", "context")}


@dataclass(frozen=True)
class ContextDist:
    """How KV context lengths are drawn: a constant, or uniform over [low, high]."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str | int) -> ContextDist:
        text = str(text).strip()
        try:
            if text.startswith("uniform:"):
                _, low, high = text.split(":")
                low_i, high_i = int(low), int(high)
            else:
                low_i = high_i = int(text)
        except ValueError:
            raise UsageError(
                f"--context: expected a number or uniform:LOW:HIGH (e.g. uniform:1:4096), got {text!r}"
            ) from None
        if low_i < 1 or high_i < low_i:
            raise UsageError(f"--context: need 1 <= LOW <= HIGH, got {text!r}")
        if high_i > MAX_CONTEXT:
            raise UsageError(f"--context: at most {MAX_CONTEXT} tokens, got {text!r}")
        return cls(low_i, high_i)

    def __str__(self) -> str:
        return str(self.low) if self.low == self.high else f"uniform:{self.low}:{self.high}"

    def draw(self, rng: random.Random) -> int:
        return self.low if self.low == self.high else rng.randint(self.low, self.high)


# Row field metadata, read by results/: HEADER, how a table heads the column; LABEL, how a row's
# label names a value ("N={}"); OLDER_FILES, what a results file from before the field meant by
# lacking it (filled in when reading); KEY, the column identifies a row across runs (every
# SweepPoint field does; kernels/rows.py and e2e/rows.py mark theirs)
HEADER, LABEL, OLDER_FILES, KEY = "header", "label", "older_files", "key"


@dataclass(frozen=True)
class SweepPoint:
    """One batch configuration to measure. Plain data: safe to pickle into a worker process."""

    kind: str
    num_tokens: int = field(metadata={HEADER: "query tokens", LABEL: "N={}"})
    num_heads: int = field(metadata={HEADER: "heads", LABEL: "h{}"})
    # None: num_heads (no GQA). Keyword-only, so that it sits beside num_heads in the columns while
    # head_dim stays the fourth positional argument
    num_kv_heads: int | None = field(default=None, kw_only=True, metadata={HEADER: "kv heads", LABEL: "kv{}"})
    head_dim: int = field(metadata={HEADER: "head dim", LABEL: "d{}"})
    dtype: str = "bfloat16"
    block_size: int = field(default=16, metadata={LABEL: "bs{}"})
    causal: bool = True
    context: str = field(default="1024", metadata={LABEL: "ctx={}"})
    decode_share: float = field(default=0.5, metadata={HEADER: "decode share", LABEL: "decode_share={}"})
    prefix_ratio: float = field(default=0.5, metadata={HEADER: "prefix ratio", LABEL: "prefix={}"})
    spec_k: int = field(default=4, metadata={LABEL: "k={}"})
    prefill_len: int = field(default=512, metadata={LABEL: "prefill_len={}"})
    seed: int = field(default=0, metadata={LABEL: "seed{}"})
    # mixed: decode sequences beside an N-token chunk; 0: decode_share decides
    decode_seqs: int = field(default=0, metadata={HEADER: "decode seqs", OLDER_FILES: 0})

    def __post_init__(self) -> None:
        if self.num_kv_heads is None:
            object.__setattr__(self, "num_kv_heads", self.num_heads)
        object.__setattr__(self, "dtype", DTYPE_ALIASES.get(self.dtype, self.dtype))
        object.__setattr__(self, "context", str(ContextDist.parse(self.context)))
        validate(self)

    @property
    def softmax_scale(self) -> float:
        return self.head_dim ** -0.5

    def key(self) -> dict:
        return asdict(self)


# a field that is not a results.csv column (GivenPoint's batch: its size is BatchColumns', its rule lengths_rule)
NOT_A_COLUMN = "not_a_column"


@dataclass(frozen=True)
class GivenPoint(SweepPoint):
    """A point whose batch is given, not drawn by its kind's rule: a replay's bucket of trace steps
    (runs/replay.py). Every consumer of a point's batch asks `build_batch`, which returns `given`, so
    the sweep, its checks, the backends' planning and the memory estimate all see the trace's batch."""

    given: Batch = field(default=None, kw_only=True, metadata={NOT_A_COLUMN: True})

    def key(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "given"}


def validate(p: SweepPoint) -> None:
    """Raise UsageError naming the flag for anything that cannot describe a real batch.

    Checks run in order and stop at the first failure, so later ones may assume earlier ones.
    Sizes are bounded above (MAX_*): nothing is drawn or allocated for an absurd value.
    """
    checks = [
        (lambda: p.kind in KINDS, "--kind", lambda: f"unknown kind {p.kind!r}; choose from {', '.join(KINDS)}"),
        (lambda: p.dtype in DTYPES, "--dtype", lambda: f"unknown dtype {p.dtype!r}; choose bf16 or fp16"),
        (lambda: _is_int(p.num_tokens, 1, MAX_TOKENS), "--tokens",
         lambda: f"query-token counts must be between 1 and {MAX_TOKENS}, got {p.num_tokens}"),
        (lambda: _is_int(p.num_heads, 1, MAX_HEADS), "--heads",
         lambda: f"must be between 1 and {MAX_HEADS}, got {p.num_heads}"),
        (lambda: _is_int(p.num_kv_heads, 1, MAX_HEADS), "--kv-heads",
         lambda: f"must be between 1 and {MAX_HEADS}, got {p.num_kv_heads}"),
        (lambda: p.num_heads % p.num_kv_heads == 0, "--kv-heads",
         lambda: f"heads ({p.num_heads}) must be divisible by kv heads ({p.num_kv_heads})"),
        (lambda: _is_int(p.head_dim, 8, MAX_HEAD_DIM) and p.head_dim % 8 == 0, "--dim",
         lambda: f"head dim must be a multiple of 8 between 8 and {MAX_HEAD_DIM}, got {p.head_dim}"),
        (lambda: _is_int(p.block_size, 16, MAX_BLOCK_SIZE) and p.block_size % 16 == 0, "--block-size",
         lambda: f"KV block size must be a multiple of 16 between 16 and {MAX_BLOCK_SIZE}, got {p.block_size}"),
        (lambda: _is_fraction(p.decode_share), "--decode-share", lambda: f"must be in [0, 1), got {p.decode_share}"),
        (lambda: _is_fraction(p.prefix_ratio), "--prefix-ratio", lambda: f"must be in [0, 1), got {p.prefix_ratio}"),
        (lambda: _is_int(p.spec_k, 1, MAX_SPEC_K), "--spec-k",
         lambda: f"must be between 1 and {MAX_SPEC_K}, got {p.spec_k}"),
        (lambda: _is_int(p.prefill_len, 1, MAX_TOKENS), "--prefill-len",
         lambda: f"must be between 1 and {MAX_TOKENS}, got {p.prefill_len}"),
        (lambda: _is_int(p.seed, 0, MAX_SEED), "--seed", lambda: f"must be between 0 and 2**63 - 1, got {p.seed}"),
        (lambda: _is_int(p.decode_seqs, 0, MAX_TOKENS), "--decode-seqs",
         lambda: f"must be between 0 and {MAX_TOKENS}, got {p.decode_seqs}"),
    ]
    for ok, flag, message in checks:
        if not ok():
            raise UsageError(f"{flag}: {message()}")


def _is_int(value, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _is_fraction(value) -> bool:
    """In [0, 1): NaN fails every comparison, so it is refused too."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value < 1.0


@dataclass(frozen=True)
class Batch:
    """Concrete sequences of a point. Decode-role sequences come first, as vLLM orders them.

    `is_decode[i]` marks sequences the split strategy sends through the kvcache kernel: they all
    share one query length (1, or spec_k for speculative decoding).
    """

    query_lens: tuple[int, ...]
    kv_lens: tuple[int, ...]
    is_decode: tuple[bool, ...]
    rule: str = field(default="", compare=False)

    @property
    def num_seqs(self) -> int:
        return len(self.query_lens)

    @property
    def num_tokens(self) -> int:
        return sum(self.query_lens)

    @property
    def num_decode_seqs(self) -> int:
        return sum(self.is_decode)


def _even_split(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _rng(p: SweepPoint) -> random.Random:
    # Seeded by the fields this kind's rule uses (not heads or dim), so a (kind, N) batch is the
    # same across shapes, and a flag another kind ignores cannot change it.
    return random.Random(f"{p.seed}:{p.num_tokens}:{_rule_details(p)}")


def build_batch(p: SweepPoint) -> Batch:
    """The documented rule for each kind (see KIND_RULES and docs/guides/kernel.md#batch-kinds), or
    the batch a GivenPoint holds."""
    if isinstance(p, GivenPoint):
        return p.given
    rng, dist, n = _rng(p), ContextDist.parse(p.context), p.num_tokens
    decode_q: list[int] = []
    decode_kv: list[int] = []
    prefill_q: list[int] = []
    prefill_kv: list[int] = []
    if p.kind == "decode":
        decode_q = [1] * n
        decode_kv = [dist.draw(rng) for _ in range(n)]
    elif p.kind == "specdec":
        k = min(p.spec_k, n)
        decode_q = [k] * (n // k)
        decode_kv = [max(dist.draw(rng), k) for _ in decode_q]
    elif p.kind in ("prefill", "prefix"):
        prefill_q = _even_split(n, math.ceil(n / p.prefill_len))
        ratio = p.prefix_ratio if p.kind == "prefix" else 0.0
        prefill_kv = [q + round(q * ratio / (1.0 - ratio)) for q in prefill_q]
    elif p.kind == "mixed":
        chunk = n if p.decode_seqs else max(1, round(n * (1.0 - p.decode_share)))
        decode_q = [1] * (p.decode_seqs or n - chunk)
        decode_kv = [dist.draw(rng) for _ in decode_q]
        prefill_q = [chunk]
        prefill_kv = [chunk + dist.draw(rng)]
    return Batch(
        query_lens=tuple(decode_q + prefill_q),
        kv_lens=tuple(decode_kv + prefill_kv),
        is_decode=tuple([True] * len(decode_q) + [False] * len(prefill_q)),
        rule=describe(p),
    )


def _rule_details(p: SweepPoint) -> str:
    unused = "decode_share" if p.decode_seqs else "decode_seqs"  # mixed: a count of decode sequences, or a share
    return ", ".join(f"{name}={getattr(p, name)}" for name in KIND_SETTINGS[p.kind] if name != unused)


def describe(p: SweepPoint) -> str:
    """How the point's lengths were drawn, in one line, for every result row."""
    return f"{p.kind}: {KIND_RULES[p.kind]} ({_rule_details(p)}, seed={p.seed})"
