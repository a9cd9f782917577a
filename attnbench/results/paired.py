"""Paired A/B statistics: a verdict from per-round ratios, and when a row has enough rounds.

`attnbench ab` measures baseline and candidate one right after the other in each round, in ABBA
order over rounds (`round_order`), so what drifts over minutes (the clock of a
power-capped GPU, a neighbour's load) reaches both sides of a round alike. The per-round ratio
candidate / baseline cancels that drift; two medians from separate runs do not (issue 23: 16 of
18 A/A rows `noisy` at 2 % from separate runs).

The interval is Student's t on the logs of the per-round ratios (results/replicates.py's
mean_interval): a round's ratio is a ratio of medians of many samples, close to log-normal, and a
handful of rounds is exactly the small count the t distribution is for. Its centre (the geometric
mean ratio) is the ratio the verdict is judged on, so ratio and interval always agree; the median
of the per-round ratios is reported beside it.

Stopping: a row measures round after round until its interval decides against the threshold
(slower, faster or same: results/verdicts.py classify, the words compare uses) after at least
`min_rounds`, or until `max_rounds`; the caller's wall-time budget ends the rest. The minimum keeps
a lucky pair of early rounds from deciding alone.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Sequence

from attnbench.results.replicates import CONFIDENCE, MIN_REPLICATES, mean_interval
from attnbench.results.verdicts import classify

BASELINE, CANDIDATE = "baseline", "candidate"
MIN_ROUNDS = 3  # t with 2 degrees of freedom: the fewest rounds whose interval may decide
DECIDED, BUDGET, ROUNDS = "decided", "budget", "max-rounds"  # why a row stopped
INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM ended the rounds first
NOT_TIMED = "not-timed"  # a side skipped it, or it failed there (error, timeout, crashed, oom)


def round_order(index: int) -> tuple[str, str]:
    """Which side goes first in round `index` (from 0): baseline, candidate, then candidate,
    baseline, ... (ABBA), so a side is never always the one measured on a warmer or cooler GPU."""
    return (BASELINE, CANDIDATE) if index % 2 == 0 else (CANDIDATE, BASELINE)


@dataclass(frozen=True)
class Paired:
    """A row's paired verdict from its rounds so far."""

    rounds: int
    ratio: float         # geometric mean of candidate / baseline per round: the interval's centre
    median_ratio: float  # median of the per-round ratios
    low: float
    high: float
    verdict: str         # slower, faster, same or noisy (classify's words)


def paired(ratios: Sequence[float], threshold: float, confidence: float = CONFIDENCE) -> Paired:
    """The verdict on per-round ratios candidate / baseline (at least two, all positive)."""
    if len(ratios) < MIN_REPLICATES:
        raise ValueError(f"need at least {MIN_REPLICATES} rounds")
    if any(not (r > 0 and math.isfinite(r)) for r in ratios):
        raise ValueError("every ratio must be a positive finite number")
    low, high = mean_interval(ratios, confidence)
    ratio = math.exp(statistics.fmean(math.log(r) for r in ratios))
    return Paired(len(ratios), ratio, statistics.median(ratios), low, high, classify(ratio, low, high, threshold))


@dataclass
class RowRounds:
    """One row's measurements, round by round: each side's median and the ratio they make."""

    baseline_ms: list[float] = field(default_factory=list)
    candidate_ms: list[float] = field(default_factory=list)
    stopped: str = ""  # DECIDED, BUDGET or ROUNDS once the row measures no more

    def add(self, baseline_ms: float, candidate_ms: float) -> None:
        self.baseline_ms.append(baseline_ms)
        self.candidate_ms.append(candidate_ms)

    @property
    def ratios(self) -> list[float]:
        return [c / b for b, c in zip(self.baseline_ms, self.candidate_ms)]

    def result(self, threshold: float, confidence: float = CONFIDENCE) -> Paired | None:
        return paired(self.ratios, threshold, confidence) if len(self.ratios) >= MIN_REPLICATES else None


def look_confidence(min_rounds: int, max_rounds: int, confidence: float = CONFIDENCE) -> float:
    """The confidence of each look's interval, so that all the looks a row may take together err no
    more than 1 - confidence (Bonferroni): a row that may stop after any of k rounds gets k chances
    to see noise as a change, and at 95 % each, an A/A row was called slower or faster 1 time in 9
    (tests/test_ab.py's simulation)."""
    return 1 - (1 - confidence) / (max_rounds - max(min_rounds, MIN_REPLICATES) + 1)


def enough(row: RowRounds, threshold: float, min_rounds: int, max_rounds: int) -> str:
    """Why the row needs no more rounds (DECIDED, ROUNDS), or "" while it needs more."""
    done = len(row.ratios)
    if done >= max(min_rounds, MIN_REPLICATES):
        result = row.result(threshold, look_confidence(min_rounds, max_rounds))
        if result is not None and result.verdict != "noisy":
            return DECIDED
    return ROUNDS if done >= max_rounds else ""
