"""`attnbench calibrate`: run a sweep twice in separate processes and print the compare threshold
that this A/A pair passes clean. A thin command; the work is in results/calibrate.py, imported
when the command runs (`--help` needs none of its pandas)."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from attnbench.cli.common import user_errors
from attnbench.console import make_console


def calibrate(
    ctx: typer.Context,
    out: Annotated[Optional[Path], typer.Option(help="Directory for the two runs (a/, b/, their logs) and calibrate.json; new or empty (default results/<time>-calibrate). Example: --out runs/calibrate")] = None,
) -> None:
    """SCENARIO_OR_FLAGS: run a scenario file (with its overrides), or `attnbench kernel` with these
    flags, twice, each in its own process, then print the smallest `compare --threshold` at which
    the pair has no slower or faster row (clean), the one at which every row is `same`, and each
    row's ratio, interval and replicate spread. Gate CI with a threshold at or above the clean one
    seen over a few calibrations on the same runner.

    Example: attnbench calibrate scenarios/seed-kernel-table.toml

    Example: attnbench calibrate --heads 32 --dim 128 --kind decode --replicates 5
    """
    from attnbench.results.calibrate import calibrate_pair, run_pair
    from attnbench.runs.rundir import RunDir

    console = make_console()
    out = out or Path("results") / f"{dt.datetime.now():%Y%m%d-%H%M%S}-calibrate"
    with user_errors(console):
        run = RunDir.prepare(out)
        with run.recording():
            a, b = run_pair(list(ctx.args), out, lambda line: console.print(escape(line), highlight=False))
        result = calibrate_pair(a, b)
        run.write_text("calibrate.json", result.to_json())
    table = Table("row", "a ms", "b ms", "b / a", "interval", "method", "spread a", "spread b", "clean needs")
    for r in result.rows.itertuples(index=False):
        table.add_row(escape(r.label), f"{r.base_time:.4f}", f"{r.new_time:.4f}", f"{r.ratio:.3f}",
                      f"{r.ci_low:.3f}-{r.ci_high:.3f}", r.method, _pct(r.spread_a), _pct(r.spread_b),
                      _pct(r.clean_need))
    console.print(table)
    for note in result.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    console.print("spread: how far apart a row's replicate medians landed in one run (max / min - 1)", highlight=False)
    console.print(f"[bold]A/A-clean threshold: {result.clean:.1%}[/] (no row slower or faster); every row "
                  f"`same` from {result.all_same:.1%}; {len(result.rows)} rows -> {escape(str(out))}/calibrate.json",
                  highlight=False)


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1%}"
