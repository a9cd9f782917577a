"""What an atlas writes once its rounds end (or are stopped): cells.csv, crossovers.csv, summary.md,
the pictures and env.json's record, all made from the saved results.csv.

Why apart from runs/atlas.py: the job decides what to measure; this turns what was measured into
files, and runs again the same way after an interrupt, so a stopped atlas still has its tables.
"""

from __future__ import annotations

import pandas as pd
from rich.console import Console

from attnbench.errors import UsageError
from attnbench.kernels.atlas_axes import CellShape
from attnbench.kernels.plan import check_measured
from attnbench.results import files
from attnbench.results.atlas_cells import cell_table, crossover_table, outcomes
from attnbench.results.atlas_plots import plot_atlas
from attnbench.results.atlas_report import summary_text
from attnbench.results.atlas_refine import Exploration
from attnbench.runs.rundir import RunDir

STOPPED = "stopped before its rounds ended (resume it to go on)"


def write_atlas_outputs(run: RunDir, env: dict, ranges: list, shape: CellShape, cpu: bool,
                        exploration: Exploration | None, console: Console) -> None:
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
    pictures = plot_atlas(cells, crossovers, ranges, rows, run.path)
    run.record(*pictures)
    verdicts = rows["verdict"].value_counts().to_dict()
    console.print("rows: " + ", ".join(f"{v} {k}" for k, v in verdicts.items()))
    located = (crossovers["status"] != "open").sum()
    console.print(f"{len(cells)} cells; {len(crossovers)} crossover edge(s), {located} located; stopped: {stop}")
    console.print(f"results: {run.path}/results.csv, cells.csv, crossovers.csv, summary.md, env.json, "
                  f"{len(pictures)} picture(s)")
    check_measured(verdicts, run.path)
