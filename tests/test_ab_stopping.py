"""The error rates of `attnbench ab`'s stopping rule (results/paired.py) on synthetic paired rows.

An identical pair must be called slower or faster at most alpha of the time over all the looks a
row takes, whatever the noise and the look schedule (hypothesis picks them); with threshold 0 the
verdict rests on the interval alone, so this checks the Bonferroni-corrected looks themselves, not
the threshold. A planted shift at the noise benchmarks/ab_power.py measured on the H200 must be
caught at the rates the ab guide states.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbench.results.paired import RowRounds, enough, look_confidence

ALPHA = 0.05


def verdicts(shift: float, noise: float, min_rounds: int, max_rounds: int, rows: int, seed: int,
             threshold: float) -> list[str]:
    """Each row measured round by round until `enough` stops it: its verdict then."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(rows):
        row = RowRounds()
        while not enough(row, threshold, min_rounds, max_rounds):
            row.add(1.0, math.exp(shift + rng.normal(0, noise)))
        out.append(row.result(threshold, look_confidence(min_rounds, max_rounds)).verdict)
    return out


@settings(max_examples=8, deadline=None)
@given(noise=st.floats(0.002, 0.05), min_rounds=st.integers(2, 6), extra=st.integers(0, 8),
       seed=st.integers(0, 2**32 - 1))
def test_aa_false_alarms_stay_within_alpha_over_all_looks(noise, min_rounds, extra, seed):
    rows = 300
    got = verdicts(0.0, noise, min_rounds, min_rounds + extra, rows, seed, threshold=0.0)
    false = sum(v in ("slower", "faster") for v in got)
    assert false <= ALPHA * rows + 3 * math.sqrt(rows * ALPHA * (1 - ALPHA)), (false, got.count("same"))


def test_each_look_spent_at_full_alpha_would_not_stay_within_it():
    """The oracle: judging every round at 95 % is what the correction is for; it does err more."""
    rng = np.random.default_rng(7)
    false = 0
    for _ in range(400):
        row = RowRounds()
        for _ in range(12):
            row.add(1.0, math.exp(rng.normal(0, 0.01)))
            if len(row.ratios) >= 2 and row.result(0.0).verdict in ("slower", "faster"):
                false += 1
                break
    assert false > ALPHA * 400


def test_defaults_catch_planted_shifts_at_the_measured_noise():
    """Looks at 4 and 8 rounds, the median (1.3 %) and a high (2 %) per-round noise of the H200 run."""
    three = verdicts(math.log(1.03), 0.013, 4, 8, 300, seed=1, threshold=0.02)
    ten = verdicts(math.log(1.10), 0.02, 4, 8, 300, seed=2, threshold=0.02)
    aa = verdicts(0.0, 0.02, 4, 8, 300, seed=3, threshold=0.02)
    assert three.count("slower") >= 0.85 * 300
    assert ten.count("slower") == 300
    assert aa.count("slower") <= ALPHA / 2 * 300  # one side of a two-sided 95 %
