"""`attnbench rule fit RUN...`: a dispatch rule fitted on measured replay or sweep rows; `rule apply`
judges an existing one on other rows.

Thin: the job is runs/rule.py, imported when the command runs (scikit-learn with it); the guide
is docs/guides/rule.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from attnbench.cli import options
from attnbench.cli.common import user_errors
from attnbench.console import make_console

Mode = Annotated[Optional[str], typer.Option(help="Use the rows of this timing mode (needed when a run holds both). "
                                                  "Example: --mode graph")]
app = typer.Typer(no_args_is_help=True, help="Dispatch rules fitted on measured rows, judged by regret.")


@app.command("fit")
def fit(
    runs: Annotated[list[Path], typer.Argument(help="Replay runs (results.csv, buckets.csv), kernel sweep runs or atlas runs (results.csv). Example: runs/h200-atlas", show_default=False)],
    out: Annotated[Path, typer.Option(help="Directory for rule.json, rule.py, summary.md and the picture (new or empty). Example: --out rules/h200", show_default=False)],
    max_depth: Annotated[int, typer.Option(help="The tree's depth at most (1-8; shallow stays readable). Example: --max-depth 4")] = 6,
    min_leaf: Annotated[float, typer.Option(help="The least share of the cells' weight a leaf may stand for (0-0.5; "
                                                 "0: no floor). Example: --min-leaf 0.05")] = 0.0,
    balance: Annotated[str, typer.Option(help="How the runs weigh against each other in the fit: runs (every run's "
                                              "cells together weigh the same in oracle time, so an atlas's long cells "
                                              "do not outvote the replays) or steps (every cell what it stands for). "
                                              "Regrets are reported on the steps either way. Example: --balance steps")] = "runs",
    folds: Annotated[int, typer.Option(help="Cross-validation folds over cells for the held-out regret (2-100). Example: --folds 10")] = 5,
    seed: Annotated[int, options.seed("the folds and the tree")] = 0,
    mode: Mode = None,
    force: options.Force = False,
) -> None:
    """Fit a shallow decision tree that picks a backend and strategy per batch, judged by regret
    against the per-cell oracle on held-out cells and on each replayed trace, and export it as
    rule.json and a standard-library rule.py.

    Example: attnbench rule fit runs/h200-replay --out rules/h200 --max-depth 3
    """
    from attnbench.runs.rule import RuleFitArgs, run_rule_fit

    console = make_console()
    with user_errors(console):
        run_rule_fit(RuleFitArgs(runs=runs, out=out, max_depth=max_depth, min_leaf=min_leaf, folds=folds, seed=seed, mode=mode,
                                 force=force, balance=balance), console)


@app.command("apply")
def apply(
    rule_dir: Annotated[Path, typer.Argument(help="A directory `attnbench rule fit` wrote (its rule.json). Example: rules/h200", show_default=False)],
    runs: Annotated[list[Path], typer.Argument(help="Replay or kernel sweep runs to judge it on. Example: runs/h200-replay-2", show_default=False)],
    mode: Mode = None,
    sampled: Annotated[bool, typer.Option("--sampled", help="Judge it on the replays' sampled steps (their --exact-sample "
                                                             "steps, each timed one by one and weighed 1) instead of "
                                                             "their bucket representatives: steps a rule fitted on the "
                                                             "same replay never saw.")] = False,
) -> None:
    """Print an existing rule's regret on other replay or sweep runs, beside the static choices and
    the per-cell oracle (the rule saw none of these cells unless they were among its runs).

    Example: attnbench rule apply rules/h200 runs/h200-replay-chat-mid
    """
    from attnbench.runs.rule import run_rule_apply

    console = make_console()
    with user_errors(console):
        run_rule_apply(rule_dir, runs, mode, console, sampled)
