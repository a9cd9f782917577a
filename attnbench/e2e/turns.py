"""A backend's strategies measured in turns, and what their run-by-run ratio says.

Why: the GPU's clock moves between runs (a power-capped H200 runs anywhere in 990-1980 MHz), so
one row's request latency spreads by a few % from run to run, and a row measured after another
differs from it by whatever the clock did in between. Measured in turns, each round runs every
strategy once (u s, then s u: the order alternates, so a steady drift favours neither), and a
strategy's run divided by unified's run of the same round cancels the clock both saw. The split /
unified comparison the run exists for is then known from the first few rounds, where each row's
own p50 may need many more runs to settle (stopping.StoppingRule.done_together).
"""

from __future__ import annotations

import math
import time
from statistics import median
from typing import Callable

from attnbench.e2e.engine import Engine, Generation
from attnbench.e2e.parallel import SINGLE, TensorParallel, from_leader
from attnbench.e2e.rows import E2EMeasures
from attnbench.e2e.stopping import REFERENCE, StoppingRule, median_interval, paired_ratios
from attnbench.kernels.rows import cells


def request_p50(run: Generation) -> float:
    """A run's median request latency: the sample the stopping rule watches (one per run, since a
    batch's requests share their steps and are not independent of each other)."""
    return median(run.latency_s)


def measure_turns(engines: dict[str, Engine], prompts: list, output_len: int, warmup: int, rule: StoppingRule,
                  on_probe: Callable[[float], None] | None,
                  tp: TensorParallel = SINGLE) -> tuple[dict[str, list[Generation]], dict[str, Exception]]:
    """Warm-up rounds, then measured rounds of every strategy's engine until `rule` is satisfied
    (by rank 0's times under --tp: every rank must run the same requests). A strategy whose run
    fails leaves the turns; the others go on. on_probe hears the first run's seconds.
    Returns each strategy's measured runs and the failures."""
    measured: dict[str, list[Generation]] = {s: [] for s in engines}
    samples: dict[str, list[float]] = {s: [] for s in engines}  # each measured run's request p50, as they come
    failed: dict[str, Exception] = {}
    live = list(engines)
    for n in range(warmup + rule.max_runs):
        if not live or (n >= warmup and from_leader(tp, lambda: rule.done_together({s: samples[s] for s in live}))):
            break
        for strategy in live if n % 2 == 0 else live[::-1]:
            start = time.perf_counter()
            try:
                run = engines[strategy].generate(prompts, output_len)
            except Exception as exc:  # noqa: BLE001  this strategy's row fails; the others are measured
                failed[strategy] = exc
                continue
            if on_probe is not None:
                on_probe(time.perf_counter() - start)
                on_probe = None
            if n >= warmup:
                measured[strategy].append(run)
                samples[strategy].append(request_p50(run))
        live = [s for s in live if s not in failed]
    return measured, failed


def interval_cells(measured: list[Generation]) -> dict:
    """How many runs were measured and the 95 % interval of their median request p50 (blank below
    the 6 runs an interval needs)."""
    interval = median_interval([request_p50(g) for g in measured]) or (math.nan, math.nan)  # a blank cell
    return cells(E2EMeasures(measured_runs=len(measured), request_p50_ci_low_s=interval[0],
                             request_p50_ci_high_s=interval[1]))


def ratio_cells(measured: dict[str, list[Generation]], strategy: str) -> dict:
    """`strategy`'s run-by-run ratio to unified: the median and its 95 % interval (blank cells for
    unified itself and without a unified row; the interval blank under 6 rounds)."""
    ratios = []
    if strategy != REFERENCE and measured.get(REFERENCE) and measured.get(strategy):
        ratios = paired_ratios({s: [request_p50(g) for g in measured[s]] for s in (REFERENCE, strategy)})[strategy]
    interval = median_interval(ratios) or (math.nan, math.nan)
    return cells(E2EMeasures(vs_unified=median(ratios) if ratios else math.nan, vs_unified_ci_low=interval[0],
                             vs_unified_ci_high=interval[1]))
