"""`rule fit --balance`: with `runs` (the default) every run's cells weigh the same in oracle time,
so a run of long cells (an atlas, each cell weighing 1) cannot outvote the replays; with `steps`
every cell weighs what it stands for. Regrets are reported on the steps either way; the choice is
recorded in rule.json and summary.md; a bad value is one error line.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from bad_input_cli import invoke
from bad_results import counted, refused
from rule_fixtures import write_run

from attnbench.results.rule_fit import BALANCE, balanced, fit_tree, fit_weights, predict

pytest.importorskip("sklearn", reason="rule fit needs scikit-learn (the `rule` extra)")
TRIED: set[str] = set()
count_what_was_tried = counted(TRIED, __name__)


def two_runs() -> tuple[pd.DataFrame, pd.DataFrame, pd.Series, pd.Series]:
    """Run 0: ten long cells where A wins by 10 % (an atlas: 10 vs 11 ms); run 1: ten short cells
    where B wins by 20 % (a replay: 1.2 vs 1.0 ms); every cell has the same features and weighs 1,
    so one leaf answers for both runs."""
    index = [f"{run}:{i}" for run in (0, 1) for i in range(10)]
    times = pd.DataFrame({"a x": [10.0] * 10 + [1.2] * 10, "b x": [11.0] * 10 + [1.0] * 10}, index=index)
    features = pd.DataFrame({"decode_rows": 4.0}, index=index)
    return features, times, pd.Series(1.0, index=index), pd.Series([0] * 10 + [1] * 10, index=index)


def test_balanced_runs_have_the_same_oracle_time():
    _, times, weights, run_of = two_runs()
    scaled = balanced(times, weights, run_of)
    oracle = (times.min(axis=1) * scaled).groupby(run_of).sum()
    assert oracle.iloc[0] == pytest.approx(oracle.iloc[1])
    assert oracle.sum() == pytest.approx((times.min(axis=1) * weights).sum())  # the total is kept
    assert (scaled.groupby(run_of).nunique() == 1).all()  # within a run the weights keep their ratios


def test_one_run_is_left_as_it_is():
    _, times, _, run_of = two_runs()
    one = run_of == 1
    weights = pd.Series(np.arange(10.0, 20.0), index=times.index[one])
    assert balanced(times[one], weights, run_of[one]).to_numpy() == pytest.approx(weights.to_numpy())


def test_balancing_lets_the_short_run_decide_its_leaf():
    features, times, weights, run_of = two_runs()
    answers = {}
    for balance in ("steps", "runs"):
        tree, _ = fit_tree(features, times, fit_weights(times, weights, run_of, balance), max_depth=2, seed=0)
        answers[balance] = set(predict(tree, features))
    # steps: A's 10 ms cells outweigh B's gain on the short ones (112 against 120 ms summed);
    # runs: each run counts once, and B loses 10 % where A loses 20 %
    assert answers == {"steps": {"a x"}, "runs": {"b x"}}
    assert BALANCE == "runs"


def test_the_fit_records_its_balance(tmp_path):
    runs = [write_run(tmp_path / "a"), write_run(tmp_path / "b", times=lambda p: {
        "vllm-fa3 unified": 10.0 + p, "vllm-fa3 split": 20.0, "flashinfer split": 30.0})]
    for flags, expected in (([], "runs"), (["--balance", "steps"], "steps")):
        out = tmp_path / f"rule-{expected}"
        result = invoke("rule", "fit", *runs, "--out", out, "--max-depth", "2", *flags)
        assert result.exit_code == 0, result.output
        assert json.loads((out / "rule.json").read_text())["fit"]["balance"] == expected
        assert f"runs balanced by {expected}" in (out / "summary.md").read_text()


@pytest.mark.parametrize("value", ["cells", "", "RUNS"])
def test_a_bad_balance_is_one_line_naming_it(tmp_path, value):
    good = write_run(tmp_path / "good")
    TRIED.add(value)
    refused(["rule", "fit", good, "--out", tmp_path / "o", "--balance", value], ["--balance"], tmp_path)
    assert not (tmp_path / "o").exists()
