"""What an atlas writes once its rounds end (or are stopped): cells.csv, crossovers.csv, summary.md,
env.json's record, then the pictures, all made from the saved results.csv.

Why apart from runs/atlas.py: the job decides what to measure; this turns what was measured into
files, and runs again the same way after an interrupt, so a stopped atlas still has its tables.
Why this order: a stopped run has seconds before a kill (`timeout -s INT -k N`), the tables take
seconds and the pictures longer, so the tables come first with a second Ctrl-C or SIGTERM held
until they are written; a signal during the pictures ends them (the temporary file of the one
being drawn removed) and the run says how to draw them.
"""

from __future__ import annotations

import pandas as pd
from rich.console import Console

from attnbench.errors import UsageError
from attnbench.interrupts import SignalReceived, signal_of, signals_deferred, signals_raise
from attnbench.kernels.atlas_axes import CellShape
from attnbench.kernels.plan import check_measured
from attnbench.results import files
from attnbench.results.atlas_cells import cell_table, crossover_table, outcomes
from attnbench.results.atlas_plots import pictures
from attnbench.results.atlas_report import headline, summary_text
from attnbench.results.atlas_refine import Exploration
from attnbench.runs.rundir import RunDir

STOPPED = "stopped before its rounds ended (resume it to go on)"


def write_atlas_outputs(run: RunDir, env: dict, ranges: list, shape: CellShape, cpu: bool,
                        exploration: Exploration | None, console: Console) -> BaseException | None:
    """The tables, then the pictures; returns the signal that stopped the pictures (None: all drawn)."""
    drawn = []
    try:
        with signals_deferred():
            rows, todo = write_tables(run, env, ranges, shape, cpu, exploration, console)
        run.record(*(path for path, _ in todo))  # before drawing: --force / --resume remove a leftover
        with signals_raise():
            for _, draw in todo:
                drawn.append(draw())
    except (KeyboardInterrupt, SignalReceived) as exc:
        console.print(f"[yellow]pictures: {len(drawn)} drawn, then {signal_of(exc)[0]} stopped them; every table "
                      f"is written (--resume {run.path} draws them)[/]")
        return exc
    console.print(f"pictures: {len(drawn)} in {run.path}")
    check_measured(rows["verdict"].value_counts().to_dict(), run.path)
    return None


def write_tables(run: RunDir, env: dict, ranges: list, shape: CellShape, cpu: bool,
                 exploration: Exploration | None, console: Console) -> tuple[pd.DataFrame, list]:
    """cells.csv, crossovers.csv, summary.md and env.json; returns the rows and the pictures to draw."""
    rows = pd.read_csv(run.path / "results.csv", dtype=files.TEXT_COLUMNS)
    if rows.empty:
        raise UsageError("no rows were measured")
    cells = cell_table(rows, shape.heads, cpu)
    crossovers = crossover_table(ranges, outcomes(cells), shape.heads)
    stop = exploration.stop if exploration else STOPPED
    run.write_text("cells.csv", cells.to_csv(index=False))
    run.write_text("crossovers.csv", crossovers.to_csv(index=False))
    run.write_text("summary.md", summary_text(cells, crossovers, ranges, rows, stop, cpu))
    env["atlas"]["results"] = {"cells": len(cells), "rounds": int(cells["round"].max()) + 1, "stop": stop,
                               "crossovers": crossovers["status"].value_counts().to_dict(),
                               "ties": int((cells["tie"] == True).sum())}  # noqa: E712  (None: no verdict)
    run.write_env(env)
    verdicts = rows["verdict"].value_counts().to_dict()
    console.print("rows: " + ", ".join(f"{v} {k}" for k, v in verdicts.items()))
    console.print(f"stopped: {stop}", highlight=False, soft_wrap=True, markup=False)
    for line in headline(cells, crossovers, ranges, cpu):
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    console.print(f"results: {run.path}/results.csv, cells.csv, crossovers.csv, summary.md, env.json")
    return rows, pictures(cells, crossovers, ranges, rows, run.path)
