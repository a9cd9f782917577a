"""The columns of an e2e run's results.csv, as dataclasses: one field is one column.

A row is the run's setup (`E2ERun`), the point (`E2EPoint`: what the grid varies, and what a
resumed run matches on), what ran it (`E2EHead`) and what it measured and concluded
(`E2EMeasures`). Their metadata (kernels/workload.py: KEY, OLDER_FILES, LABEL) says which fields
identify a row across runs, what a file from before a field meant by lacking it, and how a row
label names a value; results/ reads all of it off these fields. Rows travel as plain dicts:
kernels.rows.cells turns the dataclasses into one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from attnbench.kernels.rows import Sparse
from attnbench.kernels.workload import KEY, LABEL, OLDER_FILES


def key_meta(**more) -> dict:
    return {KEY: True, **more}


def _cudagraph_before_the_flag(df):
    """Runs from before --cudagraph captured decode graphs unless eager."""
    return df["mode"].map({"eager": "none"}).fillna("decode") if "mode" in df else "decode"


@dataclass(frozen=True)
class E2ERun:
    """What every row of the run shares: the model, its precision and cache, where and how long it ran."""

    model: str = field(metadata=key_meta())
    params_b: float
    dtype: str = field(metadata=key_meta())
    block_size: int = field(metadata=key_meta(**{LABEL: "bs{}"}))
    chunk_size: int = field(metadata=key_meta(**{LABEL: "chunk={}"}))  # 0: whole prefills
    device: str
    gpu: str
    tp: int = field(metadata=key_meta(**{OLDER_FILES: 1}))  # runs from before --tp ran on one GPU
    warmup: int
    iters: int  # the most measured runs per row (all of them with precision 0)
    min_iters: int = 0  # the fewest; 0: a file from before the stopping rule (iters were all measured)
    precision: float = 0.0  # stop once the p50's (or the ratio's, in turns) 95 % interval is within this share; 0: fixed


@dataclass(frozen=True)
class E2EPoint:
    """One point of the grid: a batch of requests of one prompt and output length."""

    input_len: int = field(metadata=key_meta(**{LABEL: "in={}"}))
    output_len: int = field(metadata=key_meta(**{LABEL: "out={}"}))
    batch_size: int = field(metadata=key_meta(**{LABEL: "batch={}"}))


@dataclass(frozen=True)
class E2EHead:
    """What ran the point: backend, library, strategy, graph mode and why that mode."""

    backend: str = field(metadata=key_meta())
    library: str | None
    library_version: str | None
    strategy: str = field(metadata=key_meta())
    mode: str = field(metadata=key_meta())  # eager or graph
    cudagraph: str = field(metadata=key_meta(**{OLDER_FILES: _cudagraph_before_the_flag}))
    graph_policy: str = ""
    graph_note: str = ""


@dataclass(frozen=True)
class E2EMeasures(Sparse):
    """What a row measured and concluded; None is a column this part does not fill (a failed row
    leaves it blank; run_metrics leaves the graph counts the runner already set)."""

    graphs: int | None = None
    graph_mem_mb: float | None = None
    request_p50_s: float | None = None
    request_p90_s: float | None = None
    request_p99_s: float | None = None
    run_p50_s: float | None = None
    output_tok_s: float | None = None
    prefill_step_p50_ms: float | None = None
    mixed_step_p50_ms: float | None = None
    decode_step_p50_ms: float | None = None
    decode_step_p90_ms: float | None = None
    host_us_per_step: float | None = None
    prefill_launch_host_us: float | None = None
    mixed_launch_host_us: float | None = None
    decode_launch_host_us: float | None = None
    prefill_steps_per_run: float | None = None
    mixed_steps_per_run: float | None = None
    decode_steps_per_run: float | None = None
    graph_steps_per_run: float | None = None
    measured_runs: int | None = None  # what the stopping rule (e2e/stopping.py) measured, min_iters to iters
    request_p50_ci_low_s: float | None = None  # the 95 % interval of the median of the runs' request
    request_p50_ci_high_s: float | None = None  # p50s (order statistics); blank under 6 runs
    # this strategy's request p50 over unified's, round by round (turns.py: measured in turns): the
    # median and its 95 % interval; blank on unified's row, without one, and (the interval) under 6 rounds
    vs_unified: float | None = None
    vs_unified_ci_low: float | None = None
    vs_unified_ci_high: float | None = None
    finite: bool | None = None
    repeatable: bool | None = None
    verdict: str | None = None
    reason: str | None = None
    fused_ops: str | None = None
    agreement: str | None = None


E2E_ROW_PARTS = (E2ERun, E2EPoint, E2EHead, E2EMeasures)
E2E_POINT = [f.name for f in fields(E2EPoint)]
E2E_KEY = tuple(f.name for part in E2E_ROW_PARTS for f in fields(part) if f.metadata.get(KEY))
E2E_ADDED_KEYS = tuple((f.name, f.metadata[OLDER_FILES]) for part in E2E_ROW_PARTS for f in fields(part)
                       if OLDER_FILES in f.metadata)
