"""e2e's time: CPU defaults said in one line, the plan and ETA before the first row, and rows that
stop once their p50 is known (issue 20). CPU only, tiny shapes.

The stopping rule is checked against an independent oracle (a Monte Carlo coverage count over a
skewed distribution whose median is known), the runner through the CLI on the tiny model.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from bad_input_cli import invoke

from attnbench.e2e.args import E2EArgs, with_device_defaults
from attnbench.e2e.presets import CPU_DEFAULTS, GPU_DEFAULTS, PRECISION
from attnbench.e2e.stopping import StoppingRule, median_interval, relative_half_width
from attnbench.results.e2e_report import ratio_reading
from attnbench.runs.e2e_plan import Eta, duration, plan_line

TINY_RUN = ["e2e", "--device", "cpu", "--input-len", "8", "--output-len", "2", "--batch-size", "1"]


# -- the rule --------------------------------------------------------------------------------------

def test_no_interval_below_six_samples_and_the_range_at_six():
    assert median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None
    assert median_interval([3.0, 1.0, 2.0, 6.0, 5.0, 4.0]) == (1.0, 6.0)  # 1 - 2/64 = 96.9 % >= 95 %


def test_the_interval_covers_the_median_at_least_95_percent_of_the_time():
    """Oracle: draws from an exponential (median ln 2, skewed as latencies are), counted."""
    rng = np.random.default_rng(0)
    for n in (6, 9, 17, 40):
        covered = 0
        for _ in range(2000):
            low, high = median_interval(list(rng.exponential(size=n)))
            covered += low <= math.log(2) <= high
        assert covered / 2000 >= 0.94, (n, covered)


def test_steady_samples_stop_at_the_minimum():
    rule = StoppingRule(min_runs=6, max_runs=30, precision=0.01)
    steady = [1.0 + 0.001 * i for i in range(6)]
    assert not rule.done(steady[:5]) and rule.done(steady)


def test_noisy_samples_run_to_the_maximum():
    rule = StoppingRule(min_runs=6, max_runs=12, precision=0.01)
    noisy = list(np.random.default_rng(1).uniform(0.5, 1.5, size=12))
    assert not any(rule.done(noisy[:n]) for n in range(12)) and rule.done(noisy)


def test_precision_zero_is_the_fixed_count():
    rule = StoppingRule(min_runs=6, max_runs=10, precision=0)
    steady = [1.0] * 10
    assert rule.fixed and not any(rule.done(steady[:n]) for n in range(10)) and rule.done(steady)
    assert "10 measured runs (a fixed count)" in rule.describe()


def test_one_slow_run_among_six_keeps_the_row_measuring():
    rule = StoppingRule(min_runs=6, max_runs=30, precision=0.01)
    assert not rule.done([1.0, 1.0, 1.0, 1.0, 1.0, 1.5])
    assert relative_half_width([1.0] * 5 + [1.5]) == pytest.approx(0.25)


def test_the_minimum_follows_a_small_iters_down_unless_given():
    assert E2EArgs(iters=3).stopping == StoppingRule(3, 3, PRECISION)
    assert E2EArgs(iters=30).stopping == StoppingRule(6, 30, PRECISION)
    assert E2EArgs(iters=30, min_iters=10, precision=0.05).stopping == StoppingRule(10, 30, 0.05)


# -- device defaults -------------------------------------------------------------------------------

def test_cpu_defaults_fill_only_what_the_user_left_out():
    args, scaled = with_device_defaults(E2EArgs(input_len=[64], iters=7), "cpu")
    assert args.input_len == [64] and args.iters == 7
    assert (args.model, args.output_len, args.batch_size, args.warmup) == (
        CPU_DEFAULTS["model"], CPU_DEFAULTS["output_len"], CPU_DEFAULTS["batch_size"], CPU_DEFAULTS["warmup"])
    assert scaled == {"model": "tiny", "output-len": "4", "batch-size": "1,2", "warmup": "0"}


def test_gpu_defaults_are_the_seed_grid_and_say_nothing():
    args, scaled = with_device_defaults(E2EArgs(), "cuda")
    assert scaled == {} and (args.model, args.input_len, args.iters) == ("llama-7b", [32, 512], GPU_DEFAULTS["iters"])


def test_the_cpu_line_names_what_was_scaled_and_keeps_the_users_flags(tmp_path):
    out = tmp_path / "run"
    result = invoke(*TINY_RUN, "--out", out)
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("CPU run")]
    assert "--model tiny" in line and "--warmup 0" in line and "--iters 3" in line and "to choose" in line
    assert "--input-len" not in line and "--batch-size" not in line  # passed: not overridden, not named
    df = pd.read_csv(out / "results.csv")
    assert set(df["input_len"]) == {8} and set(df["measured_runs"]) == {3} and set(df["model"]) == {"tiny"}


# -- plan, ETA, rows, report -------------------------------------------------------------------------

def test_plan_and_eta_come_before_the_first_row_and_rows_record_the_rule(tmp_path):
    out = tmp_path / "run"
    result = invoke(*TINY_RUN, "--batch-size", "1,2", "--warmup", "0", "--iters", "8", "--precision", "0.5",
                    "--out", out)
    assert result.exit_code == 0, result.output
    text = result.output
    plan, probe, first = text.index("plan: 2 points x 1 backend(s) x 2 strategies = 4 rows"), \
        text.index("first timed run"), text.index("point 1/2 done")
    assert plan < probe < first and "ETA" in text[probe:first] and "ETA" in text[first:]
    assert ("6-8 measured runs, stopping once the p50's (or, with strategies measured in turns, their run-by-run "
            "ratio's) 95 % interval is within ±50 % (half its width)") in text
    df = pd.read_csv(out / "results.csv")
    assert df["measured_runs"].between(6, 8).all()
    assert (df["request_p50_ci_low_s"] <= df["request_p50_ci_high_s"]).all()
    assert set(df["precision"]) == {0.5} and set(df["min_iters"]) == {6} and set(df["iters"]) == {8}
    env = json.loads((out / "env.json").read_text())["e2e"]
    assert (env["min_iters"], env["iters"], env["precision"]) == (6, 8, 0.5)


def test_a_cpu_summary_gives_no_verdict(tmp_path):
    out = tmp_path / "run"
    result = invoke(*TINY_RUN, "--out", out)
    assert result.exit_code == 0, result.output
    summary = (out / "summary.md").read_text()
    assert "CPU demo: no verdict" in summary and "pipeline demo" in summary and "pipeline demo" in result.output
    for verdict in ("unified faster", "split faster", "within noise"):
        assert verdict not in summary and verdict not in result.output
    assert "<strategy>" not in summary


def test_a_gpu_ratio_is_read_only_with_its_interval():
    assert ratio_reading("split", 1.01, 1.04, on_cpu=False) == "unified faster (1.010-1.040)"
    assert ratio_reading("split", 0.95, 0.98, on_cpu=False) == "split faster (0.950-0.980)"
    assert ratio_reading("split", 0.99, 1.02, on_cpu=False).startswith("within noise")
    assert ratio_reading("split", math.nan, math.nan, on_cpu=False).startswith("no interval")
    assert ratio_reading("split", 1.5, 1.6, on_cpu=True) == "CPU demo: no verdict"


def test_the_eta_is_a_range_until_rows_say_how_many_runs_they_take():
    rule = StoppingRule(6, 30, 0.01)
    eta = Eta([(32, 128, 1), (32, 128, 8)], rows=2, checks=4, warmup=1, rule=rule, chunk_size=None)
    assert eta.text() == "ETA after the first timed run"
    eta.probe(0.5)
    assert "6 to 30 measured runs a row" in eta.text() and "from one timed run" in eta.text()
    eta.finished((32, 128, 1), seconds=22.0, measured_runs=[6, 6])
    assert eta.text().startswith("ETA 22 s (from 22 s if every row stops at 6 runs to ")
    assert plan_line(2, ["a"], ["unified", "split"], 2, 1, rule).startswith(
        "plan: 2 points x 1 backend(s) x 2 strategies = 4 rows; each: 1 untimed check run and 1 eager one")
    assert "the graph-vs-eager check, on 1 of a point's 2 rows)" in plan_line(2, ["a"], ["unified", "split"], 1, 1, rule)
    assert "eager" not in plan_line(2, ["a"], ["unified", "split"], 0, 1, rule)
    assert (duration(59.6), duration(61), duration(3725)) == ("1 min 00 s", "1 min 01 s", "1 h 2 min")


def test_the_eta_fit_scales_runs_by_steps_and_tokens():
    eta = Eta([(8, 4, 1), (8, 4, 4), (8, 4, 16)], rows=1, checks=1, warmup=0, rule=StoppingRule(1, 1, 0),
              chunk_size=None)
    # one run of (8, 4, b): 1 prefill + 3 decode steps, b x 12 tokens; cost 0.1 s a step + 0.01 s a token
    for batch in (1, 4):
        eta.finished((8, 4, batch), seconds=2 * (0.4 + 0.12 * batch), measured_runs=[1])
    assert eta.cost((8, 4, 16)) == pytest.approx(0.4 + 0.12 * 16)
