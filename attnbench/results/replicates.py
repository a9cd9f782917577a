"""Intervals from replicates: what one run's samples cannot know about the next run.

The samples of one timing loop share their inputs' memory placement, their captured graph, their
plan and the GPU's state at that moment, so an interval built from them knows within-run noise
only: two identical runs then disagree "significantly" (issue 9: 8 of 36 rows "slower" in an A/A
pair). A replicate re-allocates the inputs, re-plans and re-captures; the spread of replicate
medians is the between-run noise a verdict must beat.

Why Welch's t on log replicate medians, not a bootstrap over replicates: a run has 3-5 replicates.
A bootstrap over 3 values has 10 distinct resamples and its interval can never be wider than
their range, so it undercovers badly at that size; Student's t accounts for the small count
exactly when the medians are roughly normal (each is the median of many samples). Welch's
Satterthwaite degrees of freedom let the two runs have different spreads (another machine, a
noisier day). Logs make the interval one for a ratio (new / base) and scale-free.

Pure math on numbers (no pandas, no torch), so compare, the summary and calibrate share it.
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

from attnbench.kernels.replicate_rule import CONFIDENCE  # one confidence: compare's and the stopping rule's
from attnbench.kernels.student_t import t_quantile

MIN_REPLICATES = 2  # a spread needs two values; fewer falls back to within-run samples


def welch_log_ratio(base: Sequence[float], new: Sequence[float],
                    confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Interval (confidence) for the ratio of typical times new / base, from replicate medians:
    Welch's t on their logs. Both need MIN_REPLICATES values; identical values give a point."""
    lb, ln = [math.log(v) for v in base], [math.log(v) for v in new]
    if min(len(lb), len(ln)) < MIN_REPLICATES:
        raise ValueError(f"need at least {MIN_REPLICATES} replicates on each side")
    vb, vn = statistics.variance(lb) / len(lb), statistics.variance(ln) / len(ln)
    diff = statistics.fmean(ln) - statistics.fmean(lb)
    se = math.sqrt(vb + vn)
    if se == 0.0:
        return math.exp(diff), math.exp(diff)
    df = (vb + vn) ** 2 / (vb ** 2 / (len(lb) - 1) + vn ** 2 / (len(ln) - 1))
    half = t_quantile(1 - (1 - confidence) / 2, df) * se
    return math.exp(diff - half), math.exp(diff + half)


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Interval for the typical value of positive numbers (a row's time, a split / unified ratio
    over paired replicates): Student's t on their logs."""
    logs = [math.log(v) for v in values]
    if len(logs) < MIN_REPLICATES:
        raise ValueError(f"need at least {MIN_REPLICATES} values")
    centre, se = statistics.fmean(logs), statistics.stdev(logs) / math.sqrt(len(logs))
    half = t_quantile(1 - (1 - confidence) / 2, len(logs) - 1) * se if se > 0 else 0.0
    return math.exp(centre - half), math.exp(centre + half)


def spread(values: Sequence[float]) -> float:
    """max / min - 1 of replicate medians: how far apart the replicates of one row landed."""
    return max(values) / min(values) - 1.0 if values else math.nan


def parse_times(cell) -> list[float]:
    """A space-separated cell of times (samples_ms, replicate_medians_ms) -> floats; [] when empty."""
    if cell is None or (isinstance(cell, float) and math.isnan(cell)):
        return []
    return [float(x) for x in str(cell).split()]
