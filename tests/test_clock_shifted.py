"""Rows whose two runs ran at different SM clocks: compare calls a change slower or faster only when
it stands both as measured and at equal clocks (the time scaled by the clocks' ratio); one the
clock could have made alone is `clock-shifted`, shown, not judged, and fails no gate
(results/verdicts.py).

On the H200 two runs of the README's command, one after the other, moved graph rows with tight
replicates by about what their median SM clock moved (docs/measurements/h200/ab.md, "The README's main
command with replicates that stop"); these tests plant that shape.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
from test_compare import replicated, shown_not_judged, write_run

from attnbench.results import compare
from attnbench.results.verdicts import CLOCK, clock_ratio, clock_shifted

pytest_plugins = ["results_fixtures"]


def row(ms: float, clock_mhz: float | None, seed: int = 0, tokens: int = 500) -> dict:
    """A graph row of three tight replicates at a median SM clock (None: no telemetry)."""
    cells = replicated([ms * f for f in (1.0, 1.004, 0.996)], seed=seed, num_tokens=tokens, mode="graph",
                       decode_seqs=0)
    return {**cells, CLOCK: math.nan if clock_mhz is None else clock_mhz}


def verdict(base: dict, new: dict, threshold: float = 0.05) -> str:
    return compare.compare_runs(pd.DataFrame([base]), pd.DataFrame([new]), threshold).rows["verdict"].iloc[0]


def test_a_change_the_clock_explains_is_clock_shifted():
    # 6 % faster at a 4 % higher clock: at equal clocks 2 % faster, inside the 5 % threshold
    assert verdict(row(0.730, 1785), row(0.686, 1860, seed=4)) == "clock-shifted"
    assert verdict(row(0.686, 1860, seed=4), row(0.730, 1785)) == "clock-shifted"


def test_a_change_that_stands_at_equal_clocks_is_judged():
    # 12 % slower at a 4 % lower clock: still 8 % slower at equal clocks
    assert verdict(row(0.700, 1860), row(0.784, 1785, seed=4)) == "slower"
    # slower at a higher clock: the clock makes it worse, not better
    assert verdict(row(0.700, 1785), row(0.770, 1860, seed=4)) == "slower"


@pytest.mark.parametrize("base_clock, new_clock", [(1980, 1980), (None, 1860), (1785, None)])
def test_equal_or_unknown_clocks_leave_the_verdict_alone(base_clock, new_clock):
    assert verdict(row(0.730, base_clock), row(0.686, new_clock, seed=4)) == "faster"


def test_the_clock_ratio_is_new_over_base_and_nan_where_unknown():
    assert clock_ratio(pd.Series({CLOCK: 1800.0}), pd.Series({CLOCK: 1710.0})) == pytest.approx(0.95)
    for base, new in (({}, {CLOCK: 1.0}), ({CLOCK: 0.0}, {CLOCK: 1.0}), ({CLOCK: "x"}, {CLOCK: 1.0})):
        assert math.isnan(clock_ratio(pd.Series(base, dtype=object), pd.Series(new, dtype=object)))
    judged = {"verdict": "same", "ratio": 1.0, "ci_low": 0.99, "ci_high": 1.01}
    assert not clock_shifted(judged, 0.5, 0.05)  # only a slower or faster verdict can shift


def test_the_cli_passes_the_gate_names_the_rows_and_says_why(tmp_path, cli):
    base = write_run(tmp_path / "base", [row(0.730, 1785)])
    new = write_run(tmp_path / "new", [row(0.686, 1860, seed=4)])
    shown_not_judged(cli, tmp_path, base, new, "0 slower, 0 faster, 1 clock-shifted", "not at equal SM clocks",
                     "clock-shifted")
