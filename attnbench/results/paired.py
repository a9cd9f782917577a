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

Stopping: a row is judged at scheduled looks, after `min_rounds` rounds and every `min_rounds`
after (and at `max_rounds`), until its interval decides against the threshold (slower, faster or
same: results/verdicts.py classify, the words compare uses); the caller's wall-time budget ends the
rest, and a row it ends is judged once more on the rounds it has, in place of the looks it did not
reach. Each look's interval is at 1 - alpha / k, k the number of scheduled looks (Bonferroni), so
all the looks of a row together call an identical pair slower or faster at most alpha of the time.
Few looks, not one a round: with t on 2 to 5 degrees of freedom, a correction over every round
(issue 23: 10 looks from round 3, t = 14 at 3 rounds) made intervals ten times the noise; the
schedule and the defaults come from benchmarks/ab_power.py's simulation on measured H200 noise.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Sequence

from attnbench.results.replicates import CONFIDENCE, MIN_REPLICATES, mean_interval, t_quantile
from attnbench.results.verdicts import classify

BASELINE, CANDIDATE = "baseline", "candidate"
MIN_ROUNDS = 4  # the first look, and the spacing of the next ones (benchmarks/ab_power.py)
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


def looks(min_rounds: int, max_rounds: int) -> list[int]:
    """The round counts a row is judged at: every min_rounds-th round, and the last."""
    first = max(min_rounds, MIN_REPLICATES)
    return sorted(set(range(first, max_rounds + 1, first)) | {max_rounds})


def look_confidence(min_rounds: int, max_rounds: int, confidence: float = CONFIDENCE) -> float:
    """The confidence of each look's interval, so that all the looks a row may take together err no
    more than 1 - confidence (Bonferroni over the scheduled looks; a look when the budget ends
    replaces the ones not reached, so a row never takes more)."""
    return 1 - (1 - confidence) / len(looks(min_rounds, max_rounds))


def enough(row: RowRounds, threshold: float, min_rounds: int, max_rounds: int) -> str:
    """Why the row needs no more rounds (DECIDED, ROUNDS), or "" while it needs more."""
    done = len(row.ratios)
    if done in looks(min_rounds, max_rounds):
        result = row.result(threshold, look_confidence(min_rounds, max_rounds))
        if result is not None and result.verdict != "noisy":
            return DECIDED
    return ROUNDS if done >= max_rounds else ""


NEEDS_AT_MOST = 1000  # rounds_needed looks no further


def rounds_needed(ratios: Sequence[float], threshold: float, confidence: float) -> int | None:
    """Rounds after which an interval at `confidence`, on this row's per-round spread so far, would be
    at most half the threshold either side of its centre (on the log scale): narrow enough to call
    an unchanged row `same` and a change of 1.5 x the threshold slower or faster. What a row that
    ended `noisy` would have taken, if its spread holds. None below MIN_REPLICATES rounds, at
    threshold 0, or beyond NEEDS_AT_MOST rounds."""
    if len(ratios) < MIN_REPLICATES or threshold <= 0:
        return None
    spread = statistics.stdev(math.log(r) for r in ratios)
    half = math.log(1 + threshold) / 2
    quantile = 1 - (1 - confidence) / 2
    return next((n for n in range(MIN_REPLICATES, NEEDS_AT_MOST + 1)
                 if t_quantile(quantile, n - 1) * spread / math.sqrt(n) <= half), None)
