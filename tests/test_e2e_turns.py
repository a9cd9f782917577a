"""A backend's strategies measured in turns (e2e/turns.py) and the rule that stops them together
(stopping.StoppingRule.done_together). CPU only: fake engines whose runs take the latencies a test
gives them, so the order, the counts and the ratios are checked against hand-computed values."""

from __future__ import annotations

from statistics import median

import pandas as pd
import pytest
from bad_input_cli import invoke

from attnbench.e2e.engine import Generation
from attnbench.e2e.stopping import StoppingRule, median_interval, paired_ratios
from attnbench.e2e.turns import measure_turns, ratio_cells


class FakeEngine:
    """Runs whose request latencies come from `latencies` in order; `log` hears every run's name."""

    def __init__(self, name: str, latencies, log: list, fail_at: int | None = None):
        self.name, self.latencies, self.log, self.fail_at, self.runs = name, iter(latencies), log, fail_at, 0

    def generate(self, prompts, output_len, record_logits=False):
        self.runs += 1
        if self.fail_at is not None and self.runs == self.fail_at:
            raise RuntimeError(f"{self.name} failed")
        self.log.append(self.name)
        value = next(self.latencies)
        return Generation([[0]], [value], value, [])


def drifting(factor: float, n: int = 40) -> list[float]:
    """A clock that slows 3 % a round: each row alone spreads widely, the ratio not at all."""
    return [factor * 1.03 ** i for i in range(n)]


def test_a_drift_both_rows_share_stops_the_ratio_at_the_minimum():
    rule = StoppingRule(min_runs=6, max_runs=30, precision=0.01)
    samples = {"unified": drifting(1.0, 6), "split": drifting(0.95, 6)}
    assert not rule.done(samples["unified"]) and not rule.done(samples["split"])  # alone: 15 % spread
    assert rule.done_together(samples)
    assert not rule.done_together({s: xs[:5] for s, xs in samples.items()})  # under the minimum


def test_ratios_that_scatter_run_to_the_maximum():
    rule = StoppingRule(min_runs=6, max_runs=10, precision=0.01)
    samples = {"unified": [1.0] * 10, "split": [0.8, 1.2] * 5}
    assert not any(rule.done_together({s: xs[:n] for s, xs in samples.items()}) for n in range(10))
    assert rule.done_together(samples)


def test_one_strategy_alone_is_the_rows_own_rule():
    rule = StoppingRule(min_runs=6, max_runs=30, precision=0.01)
    assert rule.done_together({"split": [1.0] * 6}) and not rule.done_together({"split": drifting(1.0, 6)})
    assert paired_ratios({"split": [1.0]}) == {}


def test_rounds_alternate_their_order_and_warm_ups_are_not_measured():
    log: list[str] = []
    engines = {"unified": FakeEngine("u", drifting(1.0), log), "split": FakeEngine("s", drifting(0.9), log)}
    heard = []
    measured, failed = measure_turns(engines, [[1]], 1, warmup=1, rule=StoppingRule(6, 30, 0.01),
                                     on_probe=heard.append)
    assert failed == {} and log[:6] == ["u", "s", "s", "u", "u", "s"]
    assert [len(v) for v in measured.values()] == [6, 6] and len(log) == 14  # 1 warm-up round + 6 rounds
    assert len(heard) == 1 and heard[0] >= 0  # the first run's wall seconds, once
    assert measured["unified"][0].latency_s == [1.03]  # the warm-up's 1.0 was not kept


def test_a_failing_strategy_leaves_the_turns_and_the_others_are_measured():
    log: list[str] = []
    engines = {"unified": FakeEngine("u", [1.0] * 40, log), "split": FakeEngine("s", [1.0] * 40, log, fail_at=3)}
    measured, failed = measure_turns(engines, [[1]], 1, 0, StoppingRule(6, 30, 0.01), None)
    assert list(failed) == ["split"] and str(failed["split"]) == "s failed"
    assert len(measured["unified"]) == 6 and len(measured["split"]) == 2


def test_the_ratio_cells_are_the_median_of_round_ratios_and_its_interval():
    def runs(values):
        return [Generation([[0]], [v], v, []) for v in values]
    u = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6]
    s = [0.9, 1.1, 1.08, 1.3, 1.33, 1.5, 1.52]
    oracle = sorted(b / a for a, b in zip(u, s))  # 7 ratios: the median is the 4th
    cells = ratio_cells({"unified": runs(u), "split": runs(s)}, "split")
    assert cells["vs_unified"] == pytest.approx(oracle[3])
    assert (cells["vs_unified_ci_low"], cells["vs_unified_ci_high"]) == pytest.approx(median_interval(oracle))
    for blank in (ratio_cells({"unified": runs(u), "split": runs(s)}, "unified"), ratio_cells({"split": runs(s)}, "split")):
        assert set(blank) == {"vs_unified", "vs_unified_ci_low", "vs_unified_ci_high"}
        assert all(v != v for v in blank.values())  # NaN: a blank cell, the same columns on every row
    assert median(oracle) == pytest.approx(cells["vs_unified"])


def test_a_run_writes_the_ratio_on_the_other_strategys_row(tmp_path):
    out = tmp_path / "run"
    result = invoke("e2e", "--device", "cpu", "--input-len", "8", "--output-len", "2", "--batch-size", "1",
                    "--warmup", "0", "--iters", "6", "--precision", "0", "--out", out)
    assert result.exit_code == 0, result.output
    df = pd.read_csv(out / "results.csv").set_index("strategy")
    assert pd.isna(df.loc["unified", "vs_unified"]) and df.loc["split", "vs_unified"] > 0
    assert df.loc["split", "vs_unified_ci_low"] <= df.loc["split", "vs_unified"] <= df.loc["split", "vs_unified_ci_high"]
    assert set(df["measured_runs"]) == {6}
