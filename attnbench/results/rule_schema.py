"""What rule.json may hold, checked field by field before a rule.py is rendered from it or a rule is applied.

Why: rule.json travels (a rule fitted on one machine is applied, or pasted into an engine, on
another), and its rule.py is Python that an engine imports. Every value that reaches rule.py comes
from rule.json, so rule.json is checked whole, wherever it is written or read: the types (results/
schema.py's walker over the dataclasses below), every number finite, every name one attnbench
knows (a feature of FEATURES, a backend x strategy label, a timing mode, a fit setting), the tree a
tree of at most MAX_DEPTH splits, the domain a list of shapes. One line names the first field that
is wrong; rule.py is then rendered from the checked values as Python literals (rule_export.py).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from attnbench.errors import AttnbenchError
from attnbench.kernels.choices import BACKENDS, MODES
from attnbench.kernels.workload import STRATEGIES
from attnbench.results.rule_features import FEATURES
from attnbench.results.rule_fit import BALANCES, MAX_DEPTH, MAX_FOLDS, WEIGHTINGS
from attnbench.results.schema import described, mismatch

RUN_KINDS = ("replay", "atlas", "kernel sweep", "replay's sampled steps")
EXTRA_BACKEND = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # a backend ATTNBENCH_EXTRA_BACKENDS adds


@dataclass(frozen=True)
class RuleDomain:
    shapes: list[list[int]]
    max_decode_query_len: int | None


@dataclass(frozen=True)
class RuleRun:
    path: str
    kind: str
    mode: str
    gpu: str
    trace: str | None
    cells: int


@dataclass(frozen=True)
class RuleFit:
    max_depth: int
    weighting: str
    folds: int
    seed: int
    mode: str
    cells: int
    draws: int
    cross_validated_range_pct: dict[str, list[float]]
    method: str
    min_leaf: float = 0.0
    balance: str = "steps"  # rules fitted before --balance weighed by steps


@dataclass(frozen=True)
class RuleRecord:
    """rule.json (results/rule_report.py rule_json)."""

    format: str
    version: int
    choose: str
    tree: dict
    domain: RuleDomain
    features: dict[str, str]
    features_lacking: list[str]
    choices: list[str]
    gpu: list[str]
    library_versions: dict[str, str]
    runs: list[RuleRun]
    fit: RuleFit
    regret_pct: dict[str, dict[str, float | None]]


def known_backend(name: str) -> bool:
    return name in BACKENDS or bool(os.environ.get("ATTNBENCH_EXTRA_BACKENDS")) and bool(EXTRA_BACKEND.fullmatch(name))


def known_choice(label: object) -> bool:
    """A choice label as the rows make it: "backend strategy" of a backend and a strategy attnbench knows."""
    parts = label.split(" ") if isinstance(label, str) else []
    return len(parts) == 2 and known_backend(parts[0]) and parts[1] in STRATEGIES


def check_rule(record: object) -> dict:
    """`record` when it is a rule.json this attnbench writes; AttnbenchError naming the first field that is not."""
    if not isinstance(record, dict) or record.get("format") != "attnbench-rule":
        raise AttnbenchError("is not an attnbench rule (format attnbench-rule)")
    for name, wanted in (("version", 1), ("choose", "backend strategy")):
        if record.get(name) != wanted or isinstance(record.get(name), bool):
            raise AttnbenchError(f"{name} is {described(record.get(name))}, not {wanted!r}")
    problem = mismatch(record, RuleRecord, "") or _not_finite(record, "")
    if problem:
        raise AttnbenchError(problem)
    whole = lambda v, low=1, high=math.inf: low <= v <= high  # noqa: E731 (types are checked above)
    fit, domain = record["fit"], record["domain"]
    checks = [
        ("features", set(record["features"]) <= set(FEATURES), f"names of {', '.join(FEATURES)}"),
        ("features_lacking", set(record["features_lacking"]) <= set(FEATURES), "names of features"),
        ("choices", len(set(record["choices"])) == len(record["choices"]) >= 2
         and all(known_choice(c) for c in record["choices"]), "two or more \"backend strategy\" labels attnbench knows"),
        ("gpu", all(g.strip() for g in record["gpu"]), "GPU names"),
        ("library_versions", all(known_backend(b) for b in record["library_versions"]), "backend -> version"),
        ("domain.shapes", bool(domain["shapes"]) and all(len(s) == 3 and all(whole(v) for v in s) for s in domain["shapes"]),
         "a list of [heads, KV heads, head dim], each a whole number above 0"),
        ("domain.max_decode_query_len", domain["max_decode_query_len"] is None or whole(domain["max_decode_query_len"]),
         "a whole number above 0, or null"),
        ("runs", bool(record["runs"]) and all(r["kind"] in RUN_KINDS and r["mode"] in MODES and whole(r["cells"])
                                              for r in record["runs"]), f"runs of kinds {', '.join(RUN_KINDS)}"),
        ("fit.max_depth", whole(fit["max_depth"], 1, MAX_DEPTH), f"1 to {MAX_DEPTH}"),
        ("fit.min_leaf", 0 <= fit["min_leaf"] <= 0.5, "a share from 0 to 0.5"),
        ("fit.balance", fit["balance"] in BALANCES, f"one of {', '.join(BALANCES)}"),
        ("fit.weighting", fit["weighting"] in WEIGHTINGS, f"one of {', '.join(WEIGHTINGS)}"),
        ("fit.folds", whole(fit["folds"], 2, MAX_FOLDS), f"2 to {MAX_FOLDS}"),
        ("fit.seed", whole(fit["seed"], 0), "a whole number from 0"),
        ("fit.mode", fit["mode"] in MODES, f"one of {', '.join(MODES)}"),
        ("fit.cells", whole(fit["cells"], 2), "2 or more"),
        ("fit.draws", whole(fit["draws"]), "1 or more"),
        ("fit.cross_validated_range_pct", all(len(r) == 2 and r[0] <= r[1] for r in fit["cross_validated_range_pct"].values()),
         "scope -> [low, high]"),
    ]
    for where, good, wanted in checks:
        if not good:
            value = record
            for key in where.split("."):
                value = value[key]
            raise AttnbenchError(f"{where} is {described(value)[:120]}, not {wanted}")
    check_tree(record["tree"], set(FEATURES) - set(record["features_lacking"]), set(record["choices"]))
    return record


def _not_finite(value: object, where: str) -> str:
    """The first number that is not finite (NaN, Infinity: JSON's readers take them), as a problem; '' where none."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where or 'the rule'} is {value} (not a finite number)"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return next((p for k, v in items if (p := _not_finite(v, f"{where}.{k}" if where else str(k)))), "")


def check_tree(node: object, features: set[str], choices: set[str], where: str = "tree", depth: int = 0) -> None:
    """Every node a leaf (`choice` one of the rule's choices, its cells and weight) or a split on a
    known feature at a finite number, with no other keys; at most MAX_DEPTH splits deep."""
    if not isinstance(node, dict):
        raise AttnbenchError(f"{where} is {described(node)}, not an object")
    if "choice" in node:
        extra = set(node) - {"choice", "cells", "weight"}
        if not isinstance(node["choice"], str) or node["choice"] not in choices or extra:
            raise AttnbenchError(f"{where} is not a leaf of one of the rule's choices ({', '.join(sorted(choices))}): "
                                 + (f"it has {', '.join(sorted(extra))}" if extra else f"{node['choice']!r}"[:120]))
        for key, kind in (("cells", int), ("weight", (int, float))):
            if key in node and (isinstance(node[key], bool) or not isinstance(node[key], kind) or node[key] < 0):
                raise AttnbenchError(f"{where}.{key} is {described(node[key])}, not a number from 0")
        return
    if depth >= MAX_DEPTH:
        raise AttnbenchError(f"{where} splits deeper than {MAX_DEPTH}: not a tree rule fit writes")
    threshold = node.get("threshold")
    if node.get("feature") not in features:
        raise AttnbenchError(f"{where}.feature is not one of {', '.join(sorted(features))}: {node.get('feature')!r}"[:300])
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        raise AttnbenchError(f"{where}.threshold is not a finite number: {threshold!r}"[:300])
    if set(node) != {"feature", "threshold", "le", "gt"}:
        raise AttnbenchError(f"{where} has {', '.join(sorted(set(node) - {'feature', 'threshold'}))}, not le and gt")
    for branch in ("le", "gt"):
        check_tree(node[branch], features, choices, f"{where}.{branch}", depth + 1)
