"""`attnbench ab`: the ABBA order, paired statistics that cancel drift, rounds that stop when
enough, A/A without false alarms (synthetic), and one CPU run with a planted slowdown.

The statistics are checked against scipy's Student t (an independent oracle), and the drift test
against what two unpaired runs would conclude from the same numbers."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.results.paired import (
    BASELINE,
    CANDIDATE,
    DECIDED,
    MIN_ROUNDS,
    ROUNDS,
    RowRounds,
    enough,
    look_confidence,
    looks,
    paired,
    round_order,
)
from attnbench.results.replicates import welch_log_ratio

TESTS = Path(__file__).resolve().parent
SIZE = ["--heads", "2", "--dim", "16", "--tokens", "4", "--context", "16", "--kind", "decode", "--device", "cpu",
        "--budget-ms", "5", "--backend", "reference"]


def test_rounds_alternate_abba():
    order = [side for i in range(4) for side in round_order(i)]
    assert order == [BASELINE, CANDIDATE, CANDIDATE, BASELINE, BASELINE, CANDIDATE, CANDIDATE, BASELINE]


def test_paired_interval_is_students_t_on_log_ratios():
    stats = pytest.importorskip("scipy.stats", reason="scipy (with scikit-learn) is the oracle")
    ratios = [1.031, 1.018, 1.044, 1.027, 1.036]
    logs = np.log(ratios)
    half = stats.t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs))
    result = paired(ratios, 0.02)
    assert result.low == pytest.approx(math.exp(logs.mean() - half), rel=1e-9)
    assert result.high == pytest.approx(math.exp(logs.mean() + half), rel=1e-9)
    assert result.ratio == pytest.approx(math.exp(logs.mean()), rel=1e-12)
    assert result.median_ratio == pytest.approx(1.031)
    assert result.verdict == "slower"


def drifting(true_ratio: float, rounds: int, seed: int, noise: float = 0.004) -> RowRounds:
    """Both sides of a round share a drift of +-25 % (a power-capped clock), as interleaving makes them."""
    rng = np.random.default_rng(seed)
    row = RowRounds()
    for i in range(rounds):
        drift = 1 + 0.25 * math.sin(1.7 * i)
        row.add(drift * math.exp(rng.normal(0, noise)), true_ratio * drift * math.exp(rng.normal(0, noise)))
    return row


def test_pairing_cancels_drift_that_fools_unpaired_comparison():
    row = drifting(1.05, 6, seed=1)
    low, high = welch_log_ratio(row.baseline_ms, row.candidate_ms)  # the two sides as two separate runs
    assert low < 1 < high  # unpaired, the drift hides a 5 % slowdown
    result = paired(row.ratios, 0.02)
    assert result.verdict == "slower" and 1.03 < result.low and result.high < 1.07


def stop_after(true_ratio: float, noise: float, seed: int, min_rounds: int = MIN_ROUNDS,
               max_rounds: int = 12):
    """Rounds one at a time until `enough` says stop: (rounds, why, verdict)."""
    rng = np.random.default_rng(seed)
    row = RowRounds()
    while True:
        drift = 1 + 0.2 * rng.uniform(-1, 1)
        row.add(drift * math.exp(rng.normal(0, noise)), true_ratio * drift * math.exp(rng.normal(0, noise)))
        why = enough(row, 0.02, min_rounds, max_rounds)
        if why:
            return len(row.ratios), why, row.result(0.02, look_confidence(min_rounds, max_rounds)).verdict


@pytest.mark.parametrize("true_ratio, verdict", [(1.10, "slower"), (0.90, "faster"), (1.0, "same")])
def test_clear_cases_stop_early(true_ratio, verdict):
    for seed in range(20):
        rounds, why, got = stop_after(true_ratio, noise=0.002, seed=seed)
        assert (why, got) == (DECIDED, verdict) and rounds <= 4, (seed, rounds, why, got)


def test_a_tie_runs_to_the_budget():
    """A row whose true change sits on the threshold, measured noisily, is never decided."""
    stops = [stop_after(1.02, noise=0.03, seed=seed, max_rounds=8) for seed in range(20)]
    assert sum(why == ROUNDS for _, why, _ in stops) >= 18
    assert all(rounds == 8 for rounds, why, _ in stops if why == ROUNDS)


def test_aa_gives_no_false_slower_on_synthetic_rows():
    """Identical sides, noisy and drifting, 300 rows: the looks together stay within their 95 %."""
    verdicts = [stop_after(1.0, noise=noise, seed=seed)[2] for noise in (0.003, 0.01, 0.02) for seed in range(100)]
    assert verdicts.count("slower") <= 3
    assert verdicts.count("same") >= 100  # and it is not blind: quiet rows are called the same


def test_look_confidence_spends_five_percent_over_the_looks():
    assert looks(4, 12) == [4, 8, 12] and looks(3, 10) == [3, 6, 9, 10] and looks(8, 8) == [8]
    assert look_confidence(4, 4) == pytest.approx(0.95)
    assert look_confidence(4, 12) == pytest.approx(1 - 0.05 / 3)
    assert look_confidence(3, 10) == pytest.approx(1 - 0.05 / 4)


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory):
    """One CPU ab run of two rounds, of a scenario with overrides: the candidate's reference
    busy-waits 5 ms after each launch."""
    out = tmp_path_factory.mktemp("ab") / "run"
    scenario = out.with_name("cpu.toml")
    scenario.write_text('command = "kernel"\nheads = 2\ndim = 16\ntokens = [4]\ncontext = 16\nkind = "decode"\n')
    candidate = f"ATTNBENCH_EXTRA_BACKENDS=ab_backends:SlowReference,ATTNBENCH_SLOW_MS=5,PYTHONPATH={TESTS}"
    result = CliRunner().invoke(app, ["ab", "--baseline", f"python={sys.executable}", "--candidate", candidate,
                                      "--max-rounds", "2", "--min-rounds", "2", "--out", str(out), "--scenario",
                                      str(scenario), "--device", "cpu", "--budget-ms", "5", "--backend", "reference"],
                                env={"COLUMNS": "200"})
    return result, out


def test_cpu_run_writes_its_files_and_no_verdict(planted_run):
    result, out = planted_run
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == \
        ["ab.csv", "env.json", "rounds.csv", "summary.md"]
    frame = pd.read_csv(out / "ab.csv")
    assert len(frame) == 2 and set(frame["rounds"]) == {2}
    assert set(frame["verdict"]) == {"unjudged"}  # the CPU: no verdict, said once
    assert result.output.count("CPU timings: no verdict") == 1
    assert (frame["ratio"] > 1.3).all(), frame[["label", "ratio"]]  # 5 ms on ~1 ms rows, read through the noise


def test_cpu_run_measures_in_abba_order_and_records_both_sides(planted_run):
    _, out = planted_run
    rounds = pd.read_csv(out / "rounds.csv")
    for _, point in rounds.groupby("num_tokens"):
        sides = point.drop_duplicates(["round", "side"])[["round", "side"]]
        assert list(sides["side"]) == [s for i in range(2) for s in round_order(i)]
    assert set(rounds.loc[rounds["side"] == CANDIDATE, "slow_ms"]) == {5}
    env = json.loads((out / "env.json").read_text())["ab"]
    assert env[CANDIDATE]["variables"]["ATTNBENCH_SLOW_MS"] == "5"
    for side in (BASELINE, CANDIDATE):
        versions = env[side]["versions"]
        assert versions["torch"] and versions["attnbench_path"] == os.path.join(str(TESTS.parent), "attnbench")


def test_a_candidate_that_crashes_is_a_correctness_regression(tmp_path):
    """At 8 tokens the candidate's worker dies: those rows stop `not-timed` with the reason, the
    worker is started afresh for the next point, and the exit is compare's for a broken row."""
    candidate = f"ATTNBENCH_EXTRA_BACKENDS=ab_backends:CrashingReference,PYTHONPATH={TESTS}"
    sweep = [*SIZE[:5], "8,4", *SIZE[6:]]
    result = CliRunner().invoke(app, ["ab", "--baseline", "AB_SIDE=a", "--candidate", candidate, "--max-rounds", "2",
                                      "--min-rounds", "2", "--out", str(tmp_path / "run"), *sweep],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    assert "correctness regression" in result.output
    frame = pd.read_csv(tmp_path / "run" / "ab.csv").set_index("num_tokens")
    assert set(frame.loc[8, "stopped"]) == {"not-timed"} and set(frame.loc[8, "candidate_check"]) == {"crashed"}
    assert frame.loc[8, "reason"].str.contains("candidate: the worker exited").all()
    assert set(frame.loc[4, "rounds"]) == {2} and set(frame.loc[4, "candidate_check"]) == {"pass"}
