"""The e2e command's flags as one object: their device defaults, their ranges, and the rule they make.

A flag the device scales (presets.GPU_DEFAULTS / CPU_DEFAULTS) is None until the run knows its
device: `with_device_defaults` fills it, and names what it filled, so that the CPU line can say
what was chosen on the user's behalf and a flag the user passed is never overridden.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from attnbench.e2e.graphs import check_cudagraph
from attnbench.e2e.modes import GraphMode
from attnbench.e2e.parallel import MAX_TP
from attnbench.e2e.presets import CPU_DEFAULTS, GPU_DEFAULTS, MIN_ITERS, PRECISION
from attnbench.e2e.stopping import StoppingRule
from attnbench.errors import UsageError, check_choices, check_unique
from attnbench.kernels.backends.registry import get_backend, resolve_backends
from attnbench.kernels.notices import cpu_run_line
from attnbench.traces.requests import MAX_REQUESTS as MAX_TRACE_REQUESTS
from attnbench.traces.requests import TIME_UNITS
from attnbench.kernels.workload import DEFAULT_STRATEGIES, DTYPE_ALIASES, MAX_BLOCK_SIZE, MAX_SEED, MAX_TOKENS, STRATEGIES

MAX_RUNS = 10_000  # warm-up and measured runs per row, each


@dataclass
class E2EArgs:
    """The e2e command's flags, one field per flag under the flag's name; list flags as lists.
    None on a device-scaled flag: not given (with_device_defaults fills it)."""

    model: str | None = None
    input_len: list[int] | None = None
    output_len: list[int] | None = None
    batch_size: list[int] | None = None
    chunk_size: int | None = None
    strategy: list[str] = DEFAULT_STRATEGIES
    backend: list[str] | None = None
    eager: bool = False  # the same as cudagraph="none"
    cudagraph: GraphMode | None = None  # --cudagraph none|decode|piecewise|full; None: modes.DEFAULT_MODE
    graph_policy: str = "safe"  # --graph-policy: how full graphs take metadata (graphsafe.POLICIES)
    dtype: str = "bf16"
    block_size: int = 16
    warmup: int | None = None
    iters: int | None = None  # the most measured runs per row (exactly this many with precision 0)
    min_iters: int | None = None  # None: presets.MIN_ITERS, or --iters when that is fewer
    precision: float = PRECISION  # 0: a fixed count (e2e/stopping.py)
    seed: int = 0
    device: str = "auto"
    out: Path | None = None
    profile: bool = False
    force: bool = False
    resume: Path | None = None
    isolate: bool = False  # --isolate: each point in a worker process with a watchdog (attnbench.workers)
    point_timeout: float | None = None  # --point-timeout S (default: 600 on a GPU, 120 on the CPU)
    tp: int = 1  # --tp N: tensor-parallel ranks, one process each under torchrun (attnbench.e2e.parallel)
    trace: Path | None = None  # --trace FILE: serve a request trace (runs/e2e_trace.py) instead of the grid
    arrivals: str = "trace"  # --arrivals trace|all-at-once
    time_unit: str = "s"  # --time-unit s|ms: a timed trace's timestamps
    max_requests: int | None = None  # --max-requests N: the trace's first N requests
    max_num_seqs: int | None = None  # --max-num-seqs N: most requests running at once under --trace

    def __post_init__(self):
        self.cudagraph = GraphMode.parse(self.cudagraph)  # the command line's text, or a scenario's

    @property
    def stopping(self) -> StoppingRule:
        """The measured-run rule of every row (args with their device defaults filled)."""
        low = self.min_iters if self.min_iters is not None else min(MIN_ITERS, self.iters)
        return StoppingRule(low, self.iters, self.precision)


def with_device_defaults(args: E2EArgs, device_type: str) -> tuple[E2EArgs, dict[str, str]]:
    """(args with every device-scaled flag the user left out filled, the flags filled on the CPU as
    flag -> value text: what the CPU line names; none on a GPU, whose defaults are the help's)."""
    defaults = CPU_DEFAULTS if device_type == "cpu" else GPU_DEFAULTS
    filled = {name: value for name, value in defaults.items() if getattr(args, name) is None}
    scaled = {name.replace("_", "-"): ",".join(map(str, v)) if isinstance(v, list) else str(v)
              for name, v in filled.items()} if device_type == "cpu" else {}
    return dataclasses.replace(args, **filled), scaled


def cpu_line(scaled: dict[str, str]) -> str:
    """The one line that says what the CPU run chose for the user, and how to choose otherwise:
    the same shape as kernel's (kernels/notices.py)."""
    return cpu_run_line("a pipeline demo on reference attention, no verdicts", scaled)


def length_pairs(args: E2EArgs) -> list[tuple[int, int]]:
    """--input-len and --output-len zipped; a single value goes with every value of the other.
    A length left out pairs as the GPU's default (a run fills the device's first; a scenario's
    `run --check` knows no device)."""
    ins = list(args.input_len if args.input_len is not None else GPU_DEFAULTS["input_len"])
    outs = list(args.output_len if args.output_len is not None else GPU_DEFAULTS["output_len"])
    if len(ins) == 1:
        ins *= len(outs)
    if len(outs) == 1:
        outs *= len(ins)
    if len(ins) != len(outs):
        raise UsageError(f"--input-len/--output-len: {len(ins)} input lengths and {len(outs)} output lengths "
                         "do not pair up; give equally many (they are zipped) or one of either")
    pairs = list(zip(ins, outs))
    check_unique(pairs, "--input-len/--output-len", lambda pair: f"the pair {pair[0]}/{pair[1]}")
    return pairs


def check_counts(args: E2EArgs) -> None:
    """--precision a share from 0 to 0.5; --min-iters at most --iters (where both are known)."""
    p = args.precision
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not (math.isfinite(p) and 0 <= p <= 0.5):
        raise UsageError(f"--precision: must be a share of the p50 from 0 (a fixed --iters) to 0.5 "
                         f"(0.01 is ±1 %), got {p!r}")
    if args.min_iters is not None and args.iters is not None and args.min_iters > args.iters:
        raise UsageError(f"--min-iters {args.min_iters} is above --iters {args.iters}, the most measured runs "
                         "per row; raise --iters or lower --min-iters")


def validate_args(args: E2EArgs) -> None:
    """Every flag given in range and every list without repeats, before a model is built or a row run.

    Bounds: prompt, output and chunk lengths up to workload.MAX_TOKENS (the model's own
    max_positions is checked once it is known), batches up to 4096 requests, up to 10,000
    warm-up and measured runs each, a 64-bit seed, a --point-timeout of up to a day, --tp up to 64
    (whether it splits the model is checked once the model is known: parallel.check_tp).
    """
    given = lambda value: [] if value is None else value  # noqa: E731  a flag left out has its device default
    ranges = [("--input-len", given(args.input_len), 1, MAX_TOKENS),
              ("--output-len", given(args.output_len), 1, MAX_TOKENS),
              ("--batch-size", given(args.batch_size), 1, 4096), ("--chunk-size", [args.chunk_size], 1, MAX_TOKENS),
              ("--warmup", [args.warmup], 0, MAX_RUNS), ("--iters", [args.iters], 1, MAX_RUNS),
              ("--min-iters", [args.min_iters], 1, MAX_RUNS),
              ("--block-size", [args.block_size], 16, MAX_BLOCK_SIZE), ("--seed", [args.seed], 0, MAX_SEED),
              ("--tp", [args.tp], 1, MAX_TP)]
    for flag, values, low, high in ranges:
        for v in values:
            if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and low <= v <= high):
                raise UsageError(f"{flag}: must be an integer between {low} and {high}, got {v!r}")
    check_counts(args)
    if args.block_size % 16:
        raise UsageError(f"--block-size: KV block size must be a multiple of 16, got {args.block_size}")
    if DTYPE_ALIASES.get(args.dtype) is None:
        raise UsageError(f"--dtype: unknown dtype {args.dtype!r}; choose bf16 or fp16")
    timeout = args.point_timeout
    if timeout is not None and not (isinstance(timeout, (int, float)) and 0 < timeout <= 86400):
        raise UsageError(f"--point-timeout: must be a number of seconds above 0 and at most 86400, got {timeout}")
    if timeout is not None and not args.isolate:
        raise UsageError("--point-timeout: only worker processes have a watchdog; add --isolate")
    for flag, used in (("--isolate", args.isolate), ("--profile", args.profile)):
        if used and args.tp > 1:
            raise UsageError(f"{flag} cannot be combined with --tp {args.tp} yet: every rank must run the same steps "
                             "in the one process that holds its share of the model")
    check_cudagraph(args)
    check_trace_flags(args)
    check_choices(args.strategy, STRATEGIES, "--strategy", "strategy")
    for flag, values in [("--batch-size", given(args.batch_size)), ("--strategy", args.strategy),
                         ("--backend", args.backend or [])]:
        check_unique(values, flag)


ARRIVALS = ("trace", "all-at-once")
TRACE_ONLY = ("arrivals", "time_unit", "max_requests", "max_num_seqs")
GRID_ONLY = ("input_len", "output_len", "batch_size", "warmup", "min_iters", "resume", "isolate",
             "point_timeout", "profile")


def check_trace_flags(args: E2EArgs) -> None:
    """--trace serves one stream --iters times per backend x strategy: the grid's points, its stopping rule,
    --resume, --isolate, --profile and --tp do not apply; without it the trace's flags do not."""
    flag = lambda name: "--" + name.replace("_", "-")  # noqa: E731
    given = lambda name: getattr(args, name) not in (None, False, E2EArgs.__dataclass_fields__[name].default)  # noqa: E731
    if args.trace is None:
        extra = [flag(n) for n in TRACE_ONLY if given(n)]
        if extra:
            raise UsageError(f"{extra[0]}: only with --trace FILE (a request trace to serve)")
        return
    extra = [flag(n) for n in GRID_ONLY if given(n)] + (["--precision"] if args.precision != PRECISION else [])
    extra += [f"--tp {args.tp}"] if args.tp > 1 else []
    if extra:
        raise UsageError(f"--trace cannot be combined with {extra[0]}: a trace is served --iters times per backend x "
                         "strategy (its requests' lengths come from the file; no grid, stopping rule, resume, workers "
                         "or TP)")
    if args.graph_policy != "safe":
        raise UsageError(f"--graph-policy {args.graph_policy}: --trace captures every graph bucket before timing, on "
                         "the safe policy's bounds (naive plans on the batch that first needs a bucket)")
    if args.iters is not None and args.iters < 2:
        raise UsageError(f"--iters {args.iters}: --trace serves each backend x strategy at least 2 times (one serve "
                         "gives no interval)")
    if args.arrivals not in ARRIVALS:
        raise UsageError(f"--arrivals: expected {' or '.join(ARRIVALS)}, got {args.arrivals!r}")
    if args.time_unit not in TIME_UNITS:
        raise UsageError(f"--time-unit: expected {' or '.join(TIME_UNITS)}, got {args.time_unit!r}")
    for name, value, high in (("--max-requests", args.max_requests, MAX_TRACE_REQUESTS),
                              ("--max-num-seqs", args.max_num_seqs, 4096)):
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= high):
            raise UsageError(f"{name}: must be an integer between 1 and {high}, got {value!r}")


def run_backends(args: E2EArgs, device: torch.device) -> tuple[list[str], str]:
    """(the backends an e2e run runs, a line naming the defaults it leaves out). Named ones run as
    named (check_setup refuses a strategy one lacks). Unnamed, a default backend without every
    compared strategy is left out: e2e rows are read in pairs (split against unified), and a
    backend that has unified alone would end the default run before it started."""
    backends = resolve_backends(args.backend, device)
    lacking = {b: [s for s in args.strategy if s not in get_backend(b).strategies] for b in backends}
    kept = [b for b in backends if not lacking[b]]
    if args.backend or not kept or len(kept) == len(backends):
        return backends, ""
    left = ", ".join(f"{b} (no {'/'.join(lacking[b])})" for b in backends if lacking[b])
    return kept, (f"Not run, the backend lacking a compared strategy: {left}; name it with --backend "
                  f"and --strategy to run what it has.")


def check_backends(args: E2EArgs, margs, point, backends: list[str],
                   device: torch.device) -> None:
    """Every backend runs every strategy (e2e rows are compared pairwise), or one line says why not."""
    for b in backends:
        for strategy in args.strategy:
            reason = get_backend(b).supports(point, strategy, device)
            if reason:
                raise UsageError(reason if reason.startswith("--") else f"--backend: {b} cannot run {margs.name} here: {reason}")
