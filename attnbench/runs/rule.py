"""`attnbench rule fit RUN... --out DIR` as a job: read the cells, fit, judge, write the rule's files;
`attnbench rule apply RULE_DIR RUN...`: an existing rule's regret on other rows.

Why a job of its own: fitting writes a directory like any run (claimed, locked, every file it
writes recorded, so --force removes only those), and everything that can be refused -- a bad
flag, a run that is not one, runs without two choices, scikit-learn missing -- is refused before
the directory is touched. The fit and the report are results/rule_*.py.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from attnbench.errors import AttnbenchError, UsageError
from attnbench.kernels.choices import MODES
from attnbench.results.figures import CPU_MARK, is_cpu
from attnbench.results.rule_cells import read_cells
from attnbench.results.rule_export import rule_py
from attnbench.results.rule_fit import (BALANCE, DEPTH, MAX_FOLDS, MIN_LEAF, check_balance, check_depth, check_min_leaf,
                                        cross_validated, fit_tree, fit_weights, predict, regret, tree_features,
                                        vllm_default)
from attnbench.results.rule_plot import plot_rule
from attnbench.results.rule_report import (CPU_NOTE, dumps, lacking_note, outside, regret_lines, rule_json, scopes,
                                           summary_md, table_md)
from attnbench.results.rule_schema import check_rule
from attnbench.runs.rundir import RunDir

DRAWS = 5  # fold draws (seeds seed..seed+4): how much the held-out regret moves with the folds


@dataclass
class RuleFitArgs:
    """The rule fit command's flags, one field per flag under the flag's name."""

    runs: list[Path]
    out: Path
    max_depth: int = DEPTH
    min_leaf: float = MIN_LEAF
    folds: int = 5
    seed: int = 0
    mode: str | None = None
    force: bool = False
    balance: str = BALANCE


def check_args(args: RuleFitArgs) -> None:
    check_depth(args.max_depth)
    check_min_leaf(args.min_leaf)
    check_balance(args.balance)
    if isinstance(args.folds, bool) or not isinstance(args.folds, int) or not 2 <= args.folds <= MAX_FOLDS:
        raise UsageError(f"--folds: must be a whole number from 2 to {MAX_FOLDS}, got {args.folds}")
    if isinstance(args.seed, bool) or not isinstance(args.seed, int) or args.seed < 0:
        raise UsageError(f"--seed: must be a whole number from 0, got {args.seed}")
    check_mode(args.mode)
    check_distinct(args.runs)
    if Path(args.out).is_symlink():
        raise UsageError(f"--out: {args.out} is a symlink; give the directory itself")
    try:
        import sklearn  # noqa: F401
    except ImportError:
        raise UsageError("rule fit needs scikit-learn: pip install 'attnbench[rule]' (or pip install scikit-learn)") \
            from None


def check_mode(mode: str | None) -> None:
    if mode is not None and mode not in MODES:
        raise UsageError(f"--mode: must be one of {', '.join(MODES)}, got {mode!r}")


def check_distinct(runs: list[Path]) -> None:
    """Each run given once: the same run twice would count its cells twice (and, balanced by runs,
    weigh its trace double) without a word."""
    seen: dict[str, Path] = {}
    for run in runs:
        key = os.path.realpath(run)
        if key in seen:
            same = "twice" if str(seen[key]) == str(run) else f"twice (as {seen[key]} and {run})"
            raise UsageError(f"RUN: {run} is given {same}; give each run once")
        seen[key] = run


def run_rule_fit(args: RuleFitArgs, console: Console) -> Path:
    """Cells, the tree on all of them, each cell chosen by a tree that did not see it, the tables."""
    check_args(args)
    cells = read_cells(args.runs, args.mode)
    if len(cells.times) < 2:
        raise UsageError(f"RUN: the runs hold {len(cells.times)} cell; a rule needs at least 2 to be judged")
    features, times, weights = cells.features, cells.times, cells.weights
    learn = fit_weights(times, weights, cells.run_of, args.balance)  # what the fit weighs; regrets use `weights`
    tree, weighting = fit_tree(features, times, learn, args.max_depth, args.seed, args.min_leaf)
    draws = [cross_validated(features, times, learn, args.max_depth, args.folds, args.seed + i, args.min_leaf)
             for i in range(DRAWS)]
    picks = {"rule, cross-validated": draws[0], "rule, fitted": predict(tree, features)}
    scoped = scopes(cells)
    tables = {name: regret_lines(cells, scope, picks) for name, scope in scoped.items()}
    spread = {name: [round(f(regret(times.loc[scope], weights.loc[scope], d.loc[scope])[2] for d in draws), 3)
                     for f in (min, max)] for name, scope in scoped.items()}
    fit = {"max_depth": args.max_depth, "min_leaf": args.min_leaf, "balance": args.balance, "weighting": weighting, "folds": min(args.folds, len(times)),
           "seed": args.seed, "mode": cells.runs[0]["mode"], "cells": len(times), "draws": DRAWS,
           "cross_validated_range_pct": spread,
           "method": "scikit-learn DecisionTreeClassifier on the oracle label, cost-weighted, each leaf at least "
                     "min_leaf of the weight; leaves relabelled by the lowest summed time of their cells"}
    record = rule_json(tree, cells, fit, tables)
    try:  # every value rule.py will hold, checked before the directory is touched
        exported = rule_py(record)
    except AttnbenchError as exc:
        raise AttnbenchError(f"RUN: the rule these rows give is not one rule.json can hold: {exc}") from None
    run = RunDir.prepare(Path(args.out), force=args.force, inputs=args.runs)
    with run.locked():
        run.write_text("rule.json", dumps(record))
        run.write_text("rule.py", exported)
        run.write_text("summary.md", summary_md(tree, cells, fit, tables))
        run.record(plot_rule(cells, tables, run.path / "rule_regret.png"))
    if is_cpu(cells.about):  # as replay's summary: CPU timings are a pipeline demo, their regrets no finding
        console.print(f"{CPU_MARK}: {CPU_NOTE}; so do the regrets below", highlight=False, soft_wrap=True)
    if cells.lacking:
        console.print(f"note: {lacking_note(cells.lacking)}", highlight=False, soft_wrap=True)
    for scope, lines in tables.items():
        rule = next(l for l in lines if l.name == "rule, cross-validated")
        console.print(f"{scope}: rule {rule.regret_pct:.2f} % over the oracle (cross-validated; {spread[scope][0]:.2f}-"
                      f"{spread[scope][1]:.2f} % over {DRAWS} fold draws); " + ", ".join(
            f"{l.name} " + ("lacks a cell" if math.isnan(l.regret_pct) else f"{l.regret_pct:.2f} %") for l in lines[2:5]),
            markup=False)
    console.print(f"rule: {run.path}/rule.json, rule.py, summary.md, rule_regret.png", markup=False)
    return run.path


def read_rule(rule_dir: Path) -> dict:
    """rule.json of a `rule fit` directory, its tree checked node by node."""
    import json

    path = Path(rule_dir) / "rule.json"
    if not path.is_file():
        raise UsageError(f"RULE_DIR: {rule_dir} holds no rule.json (attnbench rule fit writes one)")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise UsageError(f"RULE_DIR: {path} is not readable JSON ({exc})") from None
    try:
        return check_rule(record)
    except RecursionError:
        raise UsageError(f"RULE_DIR: {path}: the tree is nested too deep for a rule") from None
    except AttnbenchError as exc:
        raise UsageError(f"RULE_DIR: {path} {exc}" if str(exc).startswith("is not") else f"RULE_DIR: {path}: {exc}") \
            from None


def run_rule_apply(rule_dir: Path, runs: list[Path], mode: str | None, console: Console, sampled: bool = False) -> None:
    """An existing rule's regret on other runs, beside the static choices: printed, nothing written.
    sampled: judged on the replays' sampled steps (each timed alone, weighed 1) in place of their
    bucket representatives."""
    check_mode(mode)
    check_distinct(runs)
    record = read_rule(rule_dir)
    cells = read_cells(runs, mode, "sample" if sampled else "bucket")
    missing = sorted(tree_features(record["tree"]) - set(cells.features.columns))
    if missing:
        raise UsageError(f"RUN: the rule splits on {', '.join(missing)}, which the rows lack (written by an older "
                         "attnbench); measure them again, or apply a rule fitted without them")
    picks = {"rule": predict(record["tree"], cells.features)}
    refused = outside(record, cells.features)
    if refused.any():  # rule.py raises on these cells: judge them as an engine would serve them, on its default
        picks[REFUSED] = picks["rule"].where(~refused, vllm_default(cells.gpus))
    for scope, index in scopes(cells).items():
        console.print(f"## Regret: {scope}\n", markup=False)
        console.print(table_md(regret_lines(cells, index, picks)), markup=False)
    for note in provenance_notes(record, cells.gpus, cells.libraries) + domain_notes(refused, cells.weights):
        console.print(f"note: {note}", markup=False)


REFUSED = "rule, vLLM's default where it refuses"


def domain_notes(refused, weights) -> list[str]:
    """Where rule.py would refuse some of the cells (outside its shapes or its decode query lengths)."""
    if not refused.any():
        return []
    share = float(weights[refused].sum() / weights.sum() * 100)
    return [f"{int(refused.sum())} cell(s), {share:.1f} % of the weight, lie outside what the rule was fitted on "
            "(another attention shape, or decode rows with more drafts): its rule.py refuses them, so \"rule\" "
            f"shows what the tree alone would choose and \"{REFUSED}\" what an engine falling back would run"]


def provenance_notes(record: dict, gpus: list[str], libraries: dict[str, str]) -> list[str]:
    """Where the rows ran on another GPU or another version of a library than the rule was fitted on:
    its choices were measured there, not here."""
    notes = []
    if sorted(gpus) != sorted(record.get("gpu") or []):
        notes.append(f"the rule was fitted on {', '.join(record.get('gpu') or ['an unrecorded GPU'])}, "
                     f"these rows ran on {', '.join(gpus)}")
    fitted = record.get("library_versions") or {}
    moved = [f"{backend} {fitted[backend]} (the rule) against {version} (these rows)"
             for backend, version in sorted(libraries.items()) if backend in fitted and fitted[backend] != version]
    if moved:
        notes.append(f"library versions differ: {'; '.join(moved)}; fit the rule again on rows of these versions "
                     "before using it with them")
    return notes
