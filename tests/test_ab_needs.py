"""What a row that ended `noisy` would have needed (results/paired.py rounds_needed), as ab.csv's
rounds_needed column and the line ab prints under its verdicts (results/ab_files.py)."""

from __future__ import annotations

import math
import statistics

import pandas as pd
import pytest

from attnbench.results.ab_files import ab_row, needs_line
from attnbench.results.paired import NEEDS_AT_MOST, RowRounds, rounds_needed
from attnbench.results.replicates import t_quantile

CONFIDENCE = 1 - 0.05 / 3  # ab's default looks: 4, 8, 12


def half_width(spread: float, n: int) -> float:
    return t_quantile(1 - (1 - CONFIDENCE) / 2, n - 1) * spread / math.sqrt(n)


@pytest.mark.parametrize("ratios", [[1.0, 1.03, 0.98, 1.01], [1.0, 1.06, 0.95, 1.02, 0.99], [1.0, 1.004]])
@pytest.mark.parametrize("threshold", [0.02, 0.05])
def test_it_is_the_first_round_count_whose_interval_is_within_half_the_threshold(ratios, threshold):
    spread = statistics.stdev(math.log(r) for r in ratios)
    n = rounds_needed(ratios, threshold, CONFIDENCE)
    assert half_width(spread, n) <= math.log(1 + threshold) / 2
    assert n == 2 or half_width(spread, n - 1) > math.log(1 + threshold) / 2


def test_the_edges():
    assert rounds_needed([1.01, 1.01, 1.01], 0.02, CONFIDENCE) == 2  # no spread: the fewest rounds an interval takes
    assert rounds_needed([1.0], 0.02, CONFIDENCE) is None             # no spread known yet
    assert rounds_needed([1.0, 1.1], 0.0, CONFIDENCE) is None          # a zero threshold is never resolved
    assert rounds_needed([1.0, 3.0, 0.3], 0.01, CONFIDENCE) is None    # beyond NEEDS_AT_MOST


def rows_of(*per_round: list[float]) -> list[dict]:
    out = []
    for i, ratios in enumerate(per_round):
        rounds = RowRounds()
        for r in ratios:
            rounds.add(1.0, r)
        out.append(ab_row({"num_tokens": i}, f"row {i}", rounds, {}, 0.02, CONFIDENCE, cpu=False))
    return out


def test_only_noisy_rows_carry_it_and_the_line_sums_them_up():
    noisy, noisier, decided = rows_of([1.0, 1.05, 0.96, 1.02], [1.0, 1.2, 0.85, 1.1], [1.10, 1.101, 1.099, 1.1])
    assert noisy["verdict"] == noisier["verdict"] == "noisy" and decided["verdict"] == "slower"
    assert noisy["rounds_needed"] == rounds_needed([1.0, 1.05, 0.96, 1.02], 0.02, CONFIDENCE)
    assert math.isnan(decided["rounds_needed"])
    line = needs_line(pd.DataFrame([noisy, noisier, decided]), 0.02)
    assert line.startswith("2 noisy row(s) would need about ") and "change of 3.0% is caught" in line
    assert needs_line(pd.DataFrame([decided]), 0.02) == ""
    wild = rows_of([1.0, 3.0, 0.3, 2.0])[0]
    assert wild["rounds_needed"] == math.inf and f"up to more than {NEEDS_AT_MOST}" in needs_line(
        pd.DataFrame([wild]), 0.02)


def test_a_cpu_run_says_nothing_of_what_rounds_would_take():
    rounds = RowRounds()
    for r in (1.0, 1.05, 0.96, 1.02):
        rounds.add(1.0, r)
    assert math.isnan(ab_row({}, "row", rounds, {}, 0.02, CONFIDENCE, cpu=True)["rounds_needed"])
