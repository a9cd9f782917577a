"""`rule fit --min-leaf`: a leaf may not stand for less than its share of the weight, so one cell
with its own winner cannot buy a leaf of its own; by default there is no floor (docs/guides/rule.md,
"Held-out traces"); the value is recorded in rule.json and summary.md; a bad share is one error line.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from bad_results import counted, refused
from bad_input_cli import invoke
from rule_fixtures import write_run

from attnbench.results.rule_fit import MIN_LEAF, fit_tree, predict

pytest.importorskip("sklearn", reason="rule fit needs scikit-learn (the `rule` extra)")
TRIED: set[str] = set()
count_what_was_tried = counted(TRIED, __name__)


def lone_winner(cells: int = 30) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series]:
    """Cells 0..n-2: A 1 ms, B 2 ms; the last cell: A 1 ms, B 0.5 ms. Each weighs 1."""
    index = [f"0:{i}" for i in range(cells)]
    features = pd.DataFrame({"decode_rows": np.arange(cells, dtype=float)}, index=index)
    times = pd.DataFrame({"a x": 1.0, "b x": 2.0}, index=index)
    times.iloc[-1, 1] = 0.5
    return features, times, pd.Series(1.0, index=index)


def leaves(node: dict) -> list[str]:
    return [node["choice"]] if "choice" in node else leaves(node["le"]) + leaves(node["gt"])


def test_without_a_minimum_the_lone_cell_gets_its_own_leaf():
    features, times, weights = lone_winner()
    tree, _ = fit_tree(features, times, weights, max_depth=2, seed=0, min_leaf=0.0)
    assert predict(tree, features).iloc[-1] == "b x" and (predict(tree, features).iloc[:-1] == "a x").all()


def test_a_minimum_keeps_one_leaf_for_the_cells_that_agree():
    features, times, weights = lone_winner()
    assert 1 / len(features) < 0.05  # one cell is below the share a leaf needs
    tree, _ = fit_tree(features, times, weights, max_depth=2, seed=0, min_leaf=0.05)
    assert leaves(tree) == ["a x"]


def test_by_default_there_is_no_floor():
    features, times, weights = lone_winner()
    assert MIN_LEAF == 0.0
    assert predict(fit_tree(features, times, weights, max_depth=2, seed=0)[0], features).iloc[-1] == "b x"


def test_the_fit_records_its_min_leaf(tmp_path):
    run = write_run(tmp_path / "run")
    for flags, expected, said in (([], MIN_LEAF, "no floor on a leaf's share of the weight"),
                                  (["--min-leaf", "0.2"], 0.2, "at least 20 % of the weight")):
        out = tmp_path / f"rule{len(flags)}"
        result = invoke("rule", "fit", run, "--out", out, "--max-depth", "2", *flags)
        assert result.exit_code == 0, result.output
        assert json.loads((out / "rule.json").read_text())["fit"]["min_leaf"] == expected
        assert said in (out / "summary.md").read_text()


@pytest.mark.parametrize("value", ["-0.1", "0.6", "x", "nan", "inf"])
def test_a_bad_min_leaf_is_one_line_naming_it(tmp_path, value):
    good = write_run(tmp_path / "good")
    TRIED.add(value)
    refused(["rule", "fit", good, "--out", tmp_path / "o", "--min-leaf", value], ["--min-leaf"], tmp_path)
    assert not (tmp_path / "o").exists()
