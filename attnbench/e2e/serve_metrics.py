"""What a served trace measures, in the words `vllm bench serve` prints: TTFT, TPOT, ITL, E2EL, throughput.

Definitions are vLLM's (vllm/benchmarks/serve.py, calculate_metrics), on times the engine records
(serving.py), seconds after serving began:
- TTFT: a request's first token minus its arrival (queueing and prefill included);
- E2EL: its last token minus its arrival;
- TPOT: (E2EL - TTFT) / (output tokens - 1), only for requests of more than one output token;
- ITL: every gap between two consecutive tokens of a request, all requests' gaps pooled;
- each as its mean and its 50th, 90th and 99th percentile (numpy's linear interpolation);
- request throughput: requests / duration; output throughput: output tokens / duration; total
  token throughput: (prompt + output tokens) / duration; duration: the start to the last token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attnbench.e2e.serving import Served, ServedRequest
from attnbench.kernels.rows import Sparse

PERCENTILES = (50, 90, 99)
METRICS = ("ttft", "tpot", "itl", "e2el")


def request_row(index: int, r: ServedRequest) -> dict:
    """One request's arrival, lengths and latencies (ms); TPOT blank for a single output token."""
    ttft, e2el = r.token_times[0] - r.arrival, r.token_times[-1] - r.arrival
    n = len(r.token_times)
    tpot = (e2el - ttft) / (n - 1) if n > 1 else math.nan
    return {"request": index, "arrival_s": r.arrival, "input_len": r.input_len, "output_len": n,
            "ttft_ms": ttft * 1e3, "tpot_ms": tpot * 1e3, "e2el_ms": e2el * 1e3}


def inter_token_ms(r: ServedRequest) -> list[float]:
    return [(b - a) * 1e3 for a, b in zip(r.token_times, r.token_times[1:])]


def spread(values: list[float], name: str) -> dict[str, float]:
    """{name_mean_ms, name_p50_ms, ...}: blank (NaN) without values."""
    values = [v for v in values if not math.isnan(v)]
    out = {f"{name}_mean_ms": float(np.mean(values)) if values else math.nan}
    for q in PERCENTILES:
        out[f"{name}_p{q}_ms"] = float(np.percentile(values, q)) if values else math.nan
    return out


@dataclass(frozen=True)
class ServeMeasures(Sparse):
    """A served trace's columns in trace.csv (None: a failed row leaves it blank)."""

    requests: int | None = None
    duration_s: float | None = None
    request_throughput: float | None = None  # requests / s
    output_throughput: float | None = None  # output tokens / s
    total_token_throughput: float | None = None  # prompt and output tokens / s
    ttft_mean_ms: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p90_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_mean_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p90_ms: float | None = None
    tpot_p99_ms: float | None = None
    itl_mean_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p90_ms: float | None = None
    itl_p99_ms: float | None = None
    e2el_mean_ms: float | None = None
    e2el_p50_ms: float | None = None
    e2el_p90_ms: float | None = None
    e2el_p99_ms: float | None = None
    steps: int | None = None
    graphs_before_timing: int | None = None  # the engine's graphs, all captured before its first measured serve
    graphs_captured_while_serving: int | None = None  # graphs first needed in this measured serve: in its times
    tokens_as_check: float | None = None  # share of the measured serve's tokens equal to the check serve's
    agreement: str | None = None
    verdict: str | None = None
    reason: str | None = None


def summarize(served: Served) -> ServeMeasures:
    """The trace's measures, as vllm bench serve computes them from the same times."""
    rows = [request_row(i, r) for i, r in enumerate(served.requests)]
    output = sum(r["output_len"] for r in rows)
    prompt = sum(r["input_len"] for r in rows)
    duration = served.duration_s
    itl = [gap for r in served.requests for gap in inter_token_ms(r)]
    return ServeMeasures(
        requests=len(rows), duration_s=duration, request_throughput=len(rows) / duration,
        output_throughput=output / duration, total_token_throughput=(prompt + output) / duration,
        **spread([r["ttft_ms"] for r in rows], "ttft"), **spread([r["tpot_ms"] for r in rows], "tpot"),
        **spread(itl, "itl"), **spread([r["e2el_ms"] for r in rows], "e2el"), steps=len(served.steps))


TRACE_METRICS = ("duration", *(f"{m}_{s}" for m in METRICS for s in ("mean", *(f"p{q}" for q in PERCENTILES))))


@dataclass(frozen=True)
class TraceMetric:
    """One results.csv row of an e2e --trace run: a metric of one choice over its measured serves."""

    model: str
    dtype: str
    block_size: int
    chunk_size: int
    max_num_seqs: int
    arrivals: str
    trace: str  # the trace file's name
    backend: str
    strategy: str
    mode: str
    metric: str  # TRACE_METRICS: ttft_p50, tpot_p99, ..., duration
    serve_median_ms: float | None
    serve_min_ms: float | None
    serve_max_ms: float | None
    serves: int
    serves_ms: str  # each serve's value, in serve order, separated by spaces
    graphs_captured_while_serving: int  # over every measured serve: 0 once every bucket was captured before timing
    cudagraph: str
    library: str
    library_version: str
    device: str
    gpu: str
    agreement: str
    verdict: str  # pass or fail when every serve was timed; else the failure's verdict
    reason: str
