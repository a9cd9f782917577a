"""A dispatch rule fitted on cells: a shallow decision tree, judged by regret, not by accuracy.

Why regret: a rule that picks the second-best choice in a cell where the two are 1 % apart has
lost almost nothing; one that picks FA2 unified on a big mixed step has lost 3x. Regret is the
time the rule's choices take over the per-cell oracle's (the fastest passing choice in every
cell), weighed by what each cell stands for, in percent of the oracle's time.

The fit (scikit-learn's CART, imported here only): the tree learns the oracle's label, with each
cell weighed by what a wrong choice costs there; which cost measure is best depends on the
data, so three are tried (`WEIGHTINGS`) and the tree with the lowest regret on the cells it was
fitted on is kept. Then each leaf is relabelled with the choice that minimises the summed time
of its own cells (the tree's split was learnt on labels, the leaf's answer is chosen by time),
and sibling leaves that agree are merged. The result is plain data (`Node` dicts): every later
step -- prediction, the exported JSON and rule.py -- walks that one tree, so they cannot differ.
A choice that did not pass on a cell costs that cell's slowest passing time when a rule picks it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from attnbench.errors import UsageError
from attnbench.results.rule_features import walk

WEIGHTINGS = {
    "gap": "steps x (second-best - best time): what the nearest mistake costs",
    "spread": "steps x (mean - best time): what an average mistake costs",
    "steps": "steps only (plain accuracy on what the cells stand for)",
}
# how the runs of a fit weigh against each other (`rule fit --balance`)
BALANCES = {
    "runs": "every run's cells together weigh the same in oracle time",
    "steps": "every cell weighs what it stands for (a replay cell its steps, an atlas or sweep cell 1)",
}
BALANCE = "runs"
MAX_DEPTH = 8  # deeper is no longer a rule a person reads
MAX_FOLDS = 100
DEPTH = 6  # rule fit's default depth (docs/guides/rule.md, "Held-out traces": the H200's held-out tables)
# the least share of the fit's weight (of the kept weighting) a leaf may hold; none by default: fitted
# on an atlas and several replays, a floor cost more held out than it saved (docs/guides/rule.md)
MIN_LEAF = 0.0


def check_depth(max_depth: int) -> int:
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or not 1 <= max_depth <= MAX_DEPTH:
        raise UsageError(f"--max-depth: must be a whole number from 1 to {MAX_DEPTH}, got {max_depth}")
    return max_depth


def check_min_leaf(min_leaf: float) -> float:
    if isinstance(min_leaf, bool) or not isinstance(min_leaf, (int, float)) or not 0 <= min_leaf <= 0.5:
        raise UsageError(f"--min-leaf: must be a share from 0 to 0.5 of the cells' weight, got {min_leaf}")
    return float(min_leaf)


def check_balance(balance: str) -> str:
    if balance not in BALANCES:
        raise UsageError(f"--balance: must be one of {', '.join(BALANCES)}, got {balance!r}")
    return balance


def balanced(times: pd.DataFrame, weights: pd.Series, run_of: pd.Series) -> pd.Series:
    """The weights, scaled per run so that every run's oracle time (its cells' weight x fastest
    time, summed) is the same: the mean of the runs'. Why: an atlas or sweep cell weighs 1 and
    stands for no workload, a replay cell weighs the steps it stands for, so unscaled the run with
    the longest summed time (often the atlas, whose cells reach milliseconds) decides every split
    and leaf, and a rule fitted on an atlas and replays learns the atlas."""
    oracle = times.min(axis=1) * weights
    per_run = oracle.groupby(run_of).sum()
    per_run = per_run.where(per_run > 0, 1.0)
    return weights * (per_run.mean() / run_of.map(per_run))


def fit_weights(times: pd.DataFrame, weights: pd.Series, run_of: pd.Series, balance: str) -> pd.Series:
    """The weights a fit learns from (BALANCES); regrets are always reported on `weights`."""
    return balanced(times, weights, run_of) if check_balance(balance) == "runs" else weights


def effective(times: pd.DataFrame) -> pd.DataFrame:
    """Times where a choice that did not pass counts as the cell's slowest passing time."""
    return times.apply(lambda row: row.fillna(row.max()), axis=1)


def cell_times(times: pd.DataFrame, picks: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Per cell of `picks`: the picked choice's time and the fastest, ms (a pick that did not pass, or
    that these rows never timed, costs the cell's slowest passing time)."""
    columns = list(times.columns) + sorted(set(picks) - set(times.columns))
    table = effective(times.loc[picks.index].reindex(columns=columns))
    chosen = np.array([table.at[cell, choice] for cell, choice in picks.items()])
    return chosen, table.min(axis=1).to_numpy()


def regret(times: pd.DataFrame, weights: pd.Series, picks: pd.Series) -> tuple[float, float, float]:
    """(total ms of `picks`, the oracle's total ms, regret %) over the cells of `picks`."""
    chosen, fastest = cell_times(times, picks)
    w = weights.loc[picks.index].to_numpy()
    total, best = float((chosen * w).sum()), float((fastest * w).sum())
    return total, best, (total - best) / best * 100 if best else 0.0


def oracle_labels(times: pd.DataFrame) -> pd.Series:
    return times.idxmin(axis=1)


def _sample_weights(times: pd.DataFrame, weights: pd.Series, how: str) -> np.ndarray:
    ordered = np.sort(times.to_numpy(), axis=1)  # NaN last
    best = ordered[:, 0]
    if how == "gap":
        second = np.where(np.isnan(ordered[:, 1]), best, ordered[:, 1]) if ordered.shape[1] > 1 else best
        cost = second - best
    elif how == "spread":
        cost = np.nanmean(times.to_numpy(), axis=1) - best
    else:
        cost = np.ones(len(best))
    return weights.to_numpy() * cost


def predict(tree: dict, features: pd.DataFrame) -> pd.Series:
    return pd.Series([walk(tree, row)["choice"] for row in features.to_dict("records")], index=features.index)


def _from_sklearn(model, names: list[str]) -> dict:
    t = model.tree_

    def node(i: int) -> dict:
        if t.children_left[i] == -1:
            return {"leaf": i, "choice": None}
        return {"feature": names[t.feature[i]], "threshold": float(t.threshold[i]),
                "le": node(t.children_left[i]), "gt": node(t.children_right[i])}
    return node(0)


def _relabel(tree: dict, features: pd.DataFrame, times: pd.DataFrame, weights: pd.Series) -> dict:
    """Each leaf answers the choice with the lowest weighed time over its cells; sibling leaves
    that agree become one. A leaf no cell reaches answers the best single choice."""
    cost = effective(times).mul(weights, axis=0)
    fallback = str(cost.sum().idxmin())
    reached: dict[int, list] = {}
    for cell, row in zip(features.index, features.to_dict("records")):
        reached.setdefault(walk(tree, row)["leaf"], []).append(cell)

    def label(node: dict) -> dict:
        if "feature" not in node:
            cells = reached.get(node["leaf"], [])
            choice = str(cost.loc[cells].sum().idxmin()) if cells else fallback
            return {"choice": choice, "cells": len(cells), "weight": float(weights.loc[cells].sum())}
        le, gt = label(node["le"]), label(node["gt"])
        if "choice" in le and "choice" in gt and le["choice"] == gt["choice"]:
            return {"choice": le["choice"], "cells": le["cells"] + gt["cells"], "weight": le["weight"] + gt["weight"]}
        return {**node, "le": le, "gt": gt}
    return label(tree)


def fit_tree(features: pd.DataFrame, times: pd.DataFrame, weights: pd.Series, max_depth: int,
             seed: int, min_leaf: float = MIN_LEAF) -> tuple[dict, str]:
    """(the tree, the weighting kept): the lowest in-sample regret over WEIGHTINGS; every leaf
    holds at least `min_leaf` of the weighting's total (scikit-learn's min_weight_fraction_leaf)."""
    from sklearn.tree import DecisionTreeClassifier

    labels, found = oracle_labels(times), []
    for how in WEIGHTINGS:
        sample = _sample_weights(times, weights, how)
        if not (sample > 0).any():
            continue
        model = DecisionTreeClassifier(max_depth=max_depth, min_weight_fraction_leaf=min_leaf,
                                       random_state=seed % 2**32)
        model.fit(features.to_numpy(dtype=float), labels.to_numpy(), sample_weight=sample)
        tree = _relabel(_from_sklearn(model, list(features.columns)), features, times, weights)
        found.append((regret(times, weights, predict(tree, features))[2], len(found), tree, how))
    best = min(found, key=lambda f: (f[0], f[1]))
    return best[2], best[3]


def cross_validated(features: pd.DataFrame, times: pd.DataFrame, weights: pd.Series, max_depth: int, folds: int,
                    seed: int, min_leaf: float = MIN_LEAF) -> pd.Series:
    """Each cell's choice by a tree fitted without it: k-fold over cells (seeded), k = min(folds, cells)."""
    from sklearn.model_selection import KFold

    picks = pd.Series(index=features.index, dtype=object)
    splits = KFold(n_splits=min(folds, len(features)), shuffle=True, random_state=seed % 2**32)
    for train, test in splits.split(features):
        tree, _ = fit_tree(features.iloc[train], times.iloc[train], weights.iloc[train], max_depth, seed, min_leaf)
        picks.iloc[test] = predict(tree, features.iloc[test]).to_numpy()
    return picks


def vllm_default(gpus: list[str]) -> str:
    """vLLM's attention backend on a GPU: FlashAttention 3 on Hopper, FlashAttention 2 before it."""
    hopper = any(tag in gpu for gpu in gpus for tag in ("H100", "H200", "H800", "H20", "GH200"))
    return "vllm-fa3 unified" if hopper else "vllm-fa2 unified"


def static_choices(times: pd.DataFrame, weights: pd.Series) -> pd.Series:
    """Each choice's weighed total (NaN where it lacks a cell), fastest first."""
    totals = times.mul(weights, axis=0).sum(min_count=1)
    totals[times.isna().any()] = math.nan
    return totals.sort_values(na_position="last")


def tree_words(node: dict, depth: int = 0) -> list[str]:
    """The tree as indented if/else lines."""
    pad = "  " * depth
    if "choice" in node:
        return [f"{pad}-> {node['choice']} ({node['cells']} cell(s), weight {node['weight']:g})"]
    return ([f"{pad}if {node['feature']} <= {node['threshold']:g}:"] + tree_words(node["le"], depth + 1)
            + [f"{pad}else ({node['feature']} > {node['threshold']:g}):"] + tree_words(node["gt"], depth + 1))


def tree_features(node: dict) -> set[str]:
    """The features a (checked: rule_schema.check_tree) tree splits on."""
    if "choice" in node:
        return set()
    return {node["feature"]} | tree_features(node["le"]) | tree_features(node["gt"])
