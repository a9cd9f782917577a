"""An atlas's summary.md: its axes, why it stopped, who wins how often, and the crossovers located.

Why its own module: results/atlas_cells.py computes the cells and the edges, this words them as
tables a reader can paste; a CPU run says first that its timings are a pipeline demo and that
its cells name no winner.
"""

from __future__ import annotations

import math

import pandas as pd

from attnbench.kernels.atlas_axes import AXES, NAMES, TOLERANCE
from attnbench.results.figures import CPU_MARK, where_it_ran
from attnbench.results.notes import decision_counts
from attnbench.results.tables import md_lines

MAX_LINES = 60  # crossovers listed in summary.md; crossovers.csv holds them all
CPU_NOTE = ("the reference backend alone ran (on the CPU): its cells name no winner and give no verdict, so "
            "nothing is refined; the tables and pictures show the pipeline works")


def _number(value) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:g}"


def axes_section(ranges: list) -> list[str]:
    lines = [[a.name, f"{r.low:g} – {r.high:g} ({r.count} coarse, {a.scale})" if r.varies else f"{r.low:g} (fixed)",
              a.meaning] for a, r in zip(AXES, ranges)]
    return ["## Axes", "", *md_lines(["axis", "values", "meaning"], lines), ""]


def winners_section(cells: pd.DataFrame) -> list[str]:
    judged = cells[cells["winner"].notna()]
    if judged.empty:
        return ["No cell has a winner.", ""]
    lines = []
    for winner, won in judged.groupby("winner"):
        margins = won["margin"].astype(float).dropna()
        lines.append([winner, len(won), int((won["tie"] == True).sum()),  # noqa: E712  (None: no verdict)
                      f"{margins.median():.3f}" if len(margins) else "—", f"{margins.max():.3f}" if len(margins) else "—"])
    lines.sort(key=lambda line: -line[1])
    return ["## Winners", "", "Margin: the second-best passing time over the best (1.000: equal). A tie: the "
            "margin's interval reaches 1.", "",
            *md_lines(["winner", "cells", "of them ties", "median margin", "largest margin"], lines), ""]


def crossovers_section(crossovers: pd.DataFrame, ranges: list) -> list[str]:
    if crossovers.empty:
        return ["## Crossovers", "", "No two neighbouring cells have different winners.", ""]
    varying = [n for n, r in zip(NAMES, ranges) if r.varies]
    counts = crossovers["status"].value_counts().to_dict()
    lines = [[c["axis"], f"{_number(c['low'])} – {_number(c['high'])}", _number(c["width_pct"]), c["status"],
              f"{c['winner_low']}{' (tie)' if c['tie_low'] else ''} → {c['winner_high']}"
              f"{' (tie)' if c['tie_high'] else ''}",
              ", ".join(f"{n} {_number(c[n])}" for n in varying if n != c["axis"])]
             for _, c in crossovers.sort_values(["axis", *varying]).iterrows()]
    more = [f"{len(lines) - MAX_LINES} more in crossovers.csv.", ""] if len(lines) > MAX_LINES else []
    return ["## Crossovers", "", f"Edges between neighbouring cells whose winners differ: "
            + ", ".join(f"{n} {s}" for s, n in counts.items()) + f". located: the bracket is within "
            f"{TOLERANCE:.0%} of its middle; resolution: no value a batch holds lies between; open: the cell "
            "budget ended first; tie: both ends are ties, not refined.", "",
            *md_lines(["axis", "bracket", "width %", "status", "winner low → high", "on"], lines[:MAX_LINES]), "", *more]


def _shared(cells: pd.DataFrame) -> str:
    copied = int(cells["measured_as"].map(lambda v: isinstance(v, str) and v != "").sum()) if "measured_as" in cells else 0
    return (f", {len(cells) - copied} measured ({copied} the same step as a cell measured: they share its measurement, "
            "named in cells.csv's measured_as)") if copied else ""


def summary_text(cells: pd.DataFrame, crossovers: pd.DataFrame, ranges: list, rows: pd.DataFrame, stop: str,
                 cpu: bool) -> str:
    out = ["# attnbench atlas", ""]
    if cpu:
        out += [f"**{CPU_MARK}**: {CPU_NOTE}.", ""]
    modes = "/".join(sorted(rows["mode"].dropna().astype(str).unique()))
    out += [f"- where: {where_it_ran(rows)}; {modes} mode",
            f"- cells: {len(cells)} in {int(cells['round'].max()) + 1} round(s){_shared(cells)}; stopped: {stop}", ""]
    out += axes_section(ranges)
    if not cpu:
        out += winners_section(cells) + crossovers_section(crossovers, ranges)
    out += decision_counts(rows)
    out += ["The cells (every choice's median ms, whether it passed, the winner, margin, interval and tie) are in "
            "cells.csv; each crossover's coordinates in crossovers.csv.", ""]
    return "\n".join(out)
