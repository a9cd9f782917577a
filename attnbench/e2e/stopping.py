"""When a row has measured enough: the p50 known within the asked precision, or the most runs spent.

vllm bench latency times a fixed count of requests. Under CUDA graphs a request's latency barely
moves from run to run, so most of that count confirms what the first few runs said. The rule here
stops a row once the 95 % confidence interval of its median has a half-width within `precision` of
the median,
between a minimum and a maximum count; `precision` 0 is the fixed count (always the maximum).

The interval is distribution-free: with n samples sorted, [x_(j), x_(n+1-j)] covers the population
median with probability 1 - 2 P(Binomial(n, 1/2) <= j - 1), whatever the distribution (no normality,
which latency samples with an occasional slow run do not have). The widest interval, the sample's
range, reaches 95 % only from 6 samples on, so a row with fewer has no interval.

Rows measured in turns (turns.py: each round runs every strategy of a backend once) stop together:
once every row's p50 is known within `precision`, or once every strategy's run-by-run ratio to
unified is (the same interval, over the rounds' ratios), which the clock's drift between rounds
does not widen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median

CONFIDENCE = 0.95
REFERENCE = "unified"  # what the other strategies are divided by


def _binomial_half_pmf(n: int, k: int) -> float:
    """P(Binomial(n, 1/2) = k), in logs so that a large n neither overflows nor rounds to 0 early."""
    return math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) - n * math.log(2))


def median_interval(samples: list[float], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """The narrowest order-statistic interval [x_(j), x_(n+1-j)] that covers the median with at least
    `confidence`; None when even the sample's range does not (fewer than 6 samples at 95 %)."""
    n, xs = len(samples), sorted(samples)
    chosen, below = None, 0.0  # below: P(Binomial(n, 1/2) <= j - 1)
    for j in range(1, n // 2 + 1):
        below += _binomial_half_pmf(n, j - 1)
        if 1 - 2 * below < confidence:
            break
        chosen = j
    return None if chosen is None else (xs[chosen - 1], xs[n - chosen])


def relative_half_width(samples: list[float], confidence: float = CONFIDENCE) -> float | None:
    """Half the width of the median's interval, as a share of the median; None without an interval
    or with a median <= 0."""
    interval, mid = median_interval(samples, confidence), median(samples) if samples else 0.0
    if interval is None or mid <= 0:
        return None
    return (interval[1] - interval[0]) / 2 / mid


def paired_ratios(samples: dict[str, list[float]]) -> dict[str, list[float]]:
    """Each other strategy's samples over unified's of the same round (samples: per strategy, one a
    round, in order); empty without unified."""
    base = samples.get(REFERENCE)
    if not base:
        return {}
    return {s: [x / b for x, b in zip(xs, base)] for s, xs in samples.items() if s != REFERENCE}


@dataclass(frozen=True)
class StoppingRule:
    """Measured runs per row: at least `min_runs`, at most `max_runs`; in between, stop once the
    median's 95 % interval has a half-width within `precision` (a share of the median). precision 0: fixed."""

    min_runs: int
    max_runs: int
    precision: float

    @property
    def fixed(self) -> bool:
        return self.precision == 0 or self.min_runs >= self.max_runs

    def done(self, samples: list[float]) -> bool:
        n = len(samples)
        if n >= self.max_runs:
            return True
        if n < self.min_runs or self.fixed:
            return False
        width = relative_half_width(samples)
        return width is not None and width <= self.precision

    def done_together(self, samples: dict[str, list[float]]) -> bool:
        """Strategies measured in turns (one sample each a round): done when each has its most
        runs, or from the fewest on when every p50 is within the precision, or every strategy's
        ratio to unified is."""
        counts = [len(xs) for xs in samples.values()]
        if not counts or min(counts) >= self.max_runs:
            return True
        if min(counts) < self.min_runs or self.fixed:
            return False
        ratios = paired_ratios(samples)
        return all(self.done(xs) for xs in samples.values()) or (
            bool(ratios) and all(self.done(xs) for xs in ratios.values()))

    def describe(self) -> str:
        """The rule in words, for the plan printed before the first row."""
        if self.fixed:
            return f"{self.max_runs} measured runs (a fixed count)"
        return (f"{self.min_runs}-{self.max_runs} measured runs, stopping once the p50's (or, with strategies "
                f"measured in turns, their run-by-run ratio's) {CONFIDENCE * 100:.0f} % interval is within "
                f"±{self.precision * 100:g} % (half its width)")
