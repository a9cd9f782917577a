"""When a kernel row has replicates enough: compare's interval for it would resolve the threshold.

`attnbench compare` judges new / base from replicate medians (results/replicates.py: Welch's t on
their logs), and a row is `same` only when the whole interval lies within the threshold. A fixed
replicate count spends as much on a graph row whose replicates agree to 0.1 % as on an eager row
that wanders by 5 %. This rule measures a row replicate by replicate and stops it once the interval
compare would put on an A/A pair of runs like it (equal spread, equal count) has a half-width of at
most half the threshold (`converged`): a ratio within half the threshold of 1 is then called `same`,
and a change of one and a half thresholds `slower`. Otherwise it stops at the most replicates
(`budget`), and compare will likely call the row `noisy` at that threshold.

Why not e2e/stopping.py's StoppingRule: it bounds the median of many samples with an order-statistic
interval, which needs six values at 95 %; a kernel row has two to a handful of replicate medians,
the small count Student's t is for. Looking after every replicate is a sequential test; the minimum
(at least two: a spread needs two values) keeps the first pair from deciding alone.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from attnbench.errors import UsageError
from attnbench.kernels.student_t import t_quantile

CONFIDENCE = 0.95
CONVERGED, BUDGET = "converged", "budget"  # a row's `stopped`

# Replicates per row (kernels/plan.py checks the flags). A GPU needs several for compare to see
# between-run noise: `kernel` stops each row by this rule, between 2 and 3, at compare's default
# threshold, with a shorter sampling budget per replicate (the spread between replicates, not within
# one, bounds the interval): chosen for the README's command to take about a minute on an H200 (the
# goal of issue 23), where every replicate re-plans and re-captures each row. atlas and replay take
# 3. The CPU run is a pipeline demo (the reference backend, not a kernel comparison): one replicate
# keeps the README's CPU run near 20 s (docs/measurements/cpu.md).
DEFAULT_REPLICATES = {"cuda": 3, "cpu": 1}
MAX_REPLICATES = 100
ADAPTIVE = {"min_replicates": 2, "max_replicates": 3, "threshold": "5%"}  # compare's default --threshold
ADAPTIVE_BUDGET_MS = 50.0  # sampling per row and replicate when replicates stop adaptively on a GPU


def parse_threshold(text: str) -> float:
    """'5%' or '0.05' -> 0.05."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UsageError(f"--threshold: expected a percentage such as 5% (or 0.05), got {text!r}") from None
    if not 0 <= value < 1:  # also refuses nan
        raise UsageError(f"--threshold: must be at least 0% and below 100% (5% or 0.05), got {text!r}")
    return value


def aa_half_width(medians: Sequence[float], confidence: float = CONFIDENCE) -> float | None:
    """Half the width of compare's interval for new / base, as a share of the ratio, when both runs
    have these replicate medians' spread and count: Welch's t on logs with equal sides (standard
    error s * sqrt(2 / n), 2 (n - 1) degrees of freedom). None with fewer than two medians."""
    n = len(medians)
    if n < 2 or any(not (m > 0 and math.isfinite(m)) for m in medians):
        return None
    s = statistics.stdev(math.log(m) for m in medians)
    half = t_quantile(1 - (1 - confidence) / 2, 2 * (n - 1)) * s * math.sqrt(2 / n)
    return math.expm1(half)


@dataclass(frozen=True)
class ReplicateRule:
    """Replicates per row: at least `min_replicates`, at most `max_replicates`; in between, stop once
    aa_half_width is at most half of `threshold` (the share compare is asked to resolve)."""

    min_replicates: int
    max_replicates: int
    threshold: float

    def enough(self, medians: Sequence[float]) -> bool:
        """Whether a row with these replicate medians needs no more."""
        n = len(medians)
        if n >= self.max_replicates:
            return True
        return n >= self.min_replicates and self.converged(medians)

    def converged(self, medians: Sequence[float]) -> bool:
        width = aa_half_width(medians)
        return width is not None and width <= self.threshold / 2

    def stopped(self, medians: Sequence[float]) -> str:
        """`converged` or `budget`, for a row that measures no more."""
        return CONVERGED if len(medians) >= self.min_replicates and self.converged(medians) else BUDGET


def check_count(value, flag: str, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_REPLICATES:
        raise UsageError(f"{flag}: must be a whole number from {least} to {MAX_REPLICATES}, got {value}")


def rule_for(args, device_type: str, adaptive: bool) -> ReplicateRule | None:
    """The rule that stops replicates when enough: asked for by --min/--max-replicates or --threshold,
    or (adaptive, no --replicates) a GPU's default; None: a fixed count. args: kernels.plan's KernelArgs."""
    given = {k: getattr(args, k) for k in ADAPTIVE if getattr(args, k) is not None}
    if args.replicates is not None and given:
        raise UsageError(f"--replicates/--{next(iter(given)).replace('_', '-')}: --replicates N measures "
                         "exactly N; leave it out to stop replicates when enough")
    if not given and not (adaptive and args.replicates is None and device_type == "cuda"):
        return None
    least = given.get("min_replicates", ADAPTIVE["min_replicates"])
    check_count(least, "--min-replicates", 2)  # a spread needs two replicates
    most = given.get("max_replicates", max(least, ADAPTIVE["max_replicates"]))
    check_count(most, "--max-replicates", least)
    threshold = parse_threshold(given.get("threshold", ADAPTIVE["threshold"]))
    if threshold <= 0:
        raise UsageError("--threshold: must be above 0% to stop replicates (no interval is narrower than 0)")
    return ReplicateRule(least, most, threshold)
