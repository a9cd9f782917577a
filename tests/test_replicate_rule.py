"""Replicates that stop when they are enough (kernels/replicate_rule.py) and the sweep that uses them.

The rule is checked against compare's own interval (results/replicates.py's Welch's t) and, with
hypothesis, for its three promises: never before the minimum, never past the maximum, stopped once
the interval resolves the threshold. The sweep is driven with planted timings (a quiet point and a
noisy one) in place of the timing loop, so what stops it is known.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbench.kernels import sweep
from attnbench.kernels.plan import KernelArgs, plan_sweep
from attnbench.kernels.replicate_rule import ReplicateRule, aa_half_width
from attnbench.kernels.timing import Timing
from attnbench.results.replicates import welch_log_ratio

medians = st.lists(st.floats(0.01, 100.0), min_size=1, max_size=12)
rules = st.builds(lambda least, extra, threshold: ReplicateRule(least, least + extra, threshold),
                  st.integers(2, 6), st.integers(0, 6), st.floats(0.001, 0.5))


def test_half_width_is_compare_s_interval_for_an_a_a_pair():
    values = [1.00, 1.03, 0.98, 1.01]
    low, high = welch_log_ratio(values, values)
    assert aa_half_width(values) == pytest.approx(high - 1.0, rel=1e-9)
    assert low == pytest.approx(1 / high, rel=1e-9)


def test_no_half_width_below_two_medians():
    assert aa_half_width([1.0]) is None and aa_half_width([]) is None


@settings(max_examples=200, deadline=None)
@given(rules, medians)
def test_enough_keeps_the_bounds_and_the_threshold(rule, values):
    n, width = len(values), aa_half_width(values)
    if n < rule.min_replicates:
        assert not rule.enough(values)
    elif n >= rule.max_replicates:
        assert rule.enough(values)
    else:
        assert rule.enough(values) == (width <= rule.threshold / 2)
    assert rule.stopped(values) == ("converged" if n >= rule.min_replicates and width is not None
                                    and width <= rule.threshold / 2 else "budget")


@settings(max_examples=200, deadline=None)
@given(rules, st.lists(st.floats(0.01, 100.0), min_size=20, max_size=20))
def test_measuring_until_enough_stops_between_min_and_max(rule, stream):
    taken = []
    for value in stream:
        taken.append(value)
        if rule.enough(taken):
            break
    assert rule.min_replicates <= len(taken) <= rule.max_replicates
    if len(taken) < rule.max_replicates:
        assert aa_half_width(taken) <= rule.threshold / 2


def plan(**flags) -> sweep.SweepPlan:
    args = KernelArgs(heads=[2], dim=[16], tokens=[4, 8], context="16", kind=["decode"], device="cpu",
                      backend=["reference"], budget_ms=1.0, **flags)
    return plan_sweep(args)


def planted(monkeypatch, noisy_from_call: int, fail_at_call: int | None = None) -> None:
    """time_kernels replaced: every runner's samples are one planted value; from call
    `noisy_from_call` on they alternate 1 and 2 ms, a spread no threshold resolves."""
    calls = []

    def time_kernels(runners, cfg):
        calls.append(1)
        if len(calls) == fail_at_call:
            raise RuntimeError("planted failure")
        value = 1.0 if len(calls) < noisy_from_call else (1.0, 2.0)[len(calls) % 2]
        return [Timing([value] * 3, 1, True) for _ in runners]

    monkeypatch.setattr(sweep, "time_kernels", time_kernels)


def measured(p: sweep.SweepPlan) -> list[dict]:
    rows = []
    sweep.run_sweep(p, None, rows.append)
    return rows


def test_quiet_rows_stop_at_the_minimum_and_noisy_ones_at_the_maximum(monkeypatch):
    p = plan(min_replicates=2, max_replicates=5, threshold="3%")
    planted(monkeypatch, noisy_from_call=3)  # one timing call per replicate of a point: 2 quiet, then noisy
    rows = measured(p)
    assert [(r["num_tokens"], r["replicates"], r["stopped"]) for r in rows] == [
        (4, 2, "converged"), (4, 2, "converged"), (8, 5, "budget"), (8, 5, "budget")]
    assert rows[0]["ratio_half_width"] == 0.0 and rows[0]["stop_threshold"] == pytest.approx(0.03)
    assert rows[2]["ratio_half_width"] > 0.015
    assert len(rows[2]["replicate_medians_ms"].split()) == 5


def test_replicates_n_is_exactly_n(monkeypatch):
    planted(monkeypatch, noisy_from_call=math.inf)
    rows = measured(plan(replicates=3))
    assert [r["replicates"] for r in rows] == [3, 3, 3, 3]
    assert all(r.get("stopped") is None for r in rows)


def test_a_failure_in_one_point_keeps_the_other_s_rows(monkeypatch):
    planted(monkeypatch, noisy_from_call=3, fail_at_call=4)  # the second point's second replicate
    rows = measured(plan(min_replicates=2, max_replicates=4))
    assert [r["verdict"] for r in rows] == ["pass", "pass", "error", "error"]
    assert rows[0]["stopped"] == "converged" and "planted failure" in rows[2]["reason"]


def test_cpu_default_is_one_replicate_and_a_gpu_default_stops_when_enough():
    assert plan().replicates == 1 and plan().rule is None
    args = KernelArgs(heads=[2], dim=[16], tokens=[4], context="16", kind=["decode"], backend=["reference"])
    gpu = plan_sweep(args, machine=False, adaptive=True)
    assert gpu.rule == ReplicateRule(2, 3, 0.05) and gpu.replicates == 3 and gpu.timing.budget_ms == 50.0
    assert plan_sweep(args, machine=False).rule is None  # atlas and replay keep 3


def test_the_notes_count_converged_and_budget_rows_and_name_the_threshold():
    import pandas as pd

    from attnbench.results.notes import run_notes

    rows = pd.DataFrame({"verdict": ["pass", "pass", "pass", "skipped"], "replicates": [2, 2, 4, None],
                         "replicate_medians_ms": ["1 1", "1 1.001", "1 2 1 2", None],
                         "stopped": ["converged", "converged", "budget", None],
                         "stop_threshold": [0.03, 0.03, 0.03, None], "device": ["cuda:0"] * 4})
    line = next(n for n in run_notes(rows) if n.startswith("replicates stopped when enough"))
    assert "(2-4 per row): 2 of 3 timed rows converged" in line and "1 stopped at the budget" in line
    assert "--threshold 3.0%" in line
    assert not any("stopped when enough" in n for n in run_notes(rows.drop(columns=["stopped"])))


def test_the_kernel_command_writes_why_rows_stopped(tmp_path):
    import pandas as pd

    from tests.bad_input_cli import KERNEL, invoke

    result = invoke(*KERNEL, "--out", tmp_path / "run", "--min-replicates", "2", "--max-replicates", "2",
                    "--threshold", "3%")
    assert result.exit_code == 0, result.output
    rows = pd.read_csv(tmp_path / "run" / "results.csv")
    assert set(rows["replicates"]) == {2} and set(rows["stopped"]) <= {"converged", "budget"}
    assert (rows["ratio_half_width"] >= 0).all() and set(rows["stop_threshold"]) == {0.03}
    summary = (tmp_path / "run" / "summary.md").read_text()
    assert "replicates stopped when enough (2 per row)" in summary and "--threshold 3.0%" in summary
    assert "--threshold 3.0%" in result.stdout.replace("\n", " ")
