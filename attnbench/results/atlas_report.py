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


def winners_table(cells: pd.DataFrame) -> list[str]:
    """Who wins how many cells, by how much (markdown lines; [] when no cell has a winner)."""
    judged = cells[cells["winner"].notna()]
    if judged.empty:
        return []
    lines = []
    for winner, won in judged.groupby("winner"):
        margins = won["margin"].astype(float).dropna()
        lines.append([winner, len(won), int((won["tie"] == True).sum()),  # noqa: E712  (None: no verdict)
                      f"{margins.median():.3f}" if len(margins) else "—", f"{margins.max():.3f}" if len(margins) else "—"])
    lines.sort(key=lambda line: -line[1])
    return md_lines(["winner", "cells", "of them ties", "median margin", "largest margin"], lines)


def winners_section(cells: pd.DataFrame) -> list[str]:
    table = winners_table(cells)
    if not table:
        return ["No cell has a winner.", ""]
    return ["## Winners", "", "Margin: the second-best passing time over the best (1.000: equal). A tie: the "
            "margin's interval reaches 1.", "", *table, ""]


def crossovers_table(crossovers: pd.DataFrame, ranges: list, limit: int) -> list[str]:
    """The first `limit` edges as markdown lines, and a line saying how many more crossovers.csv holds."""
    varying = [n for n, r in zip(NAMES, ranges) if r.varies]
    lines = [[c["axis"], f"{_number(c['low'])} – {_number(c['high'])}", _number(c["width_pct"]), c["status"],
              f"{c['winner_low']}{' (tie)' if c['tie_low'] else ''} → {c['winner_high']}"
              f"{' (tie)' if c['tie_high'] else ''}",
              ", ".join(f"{n} {_number(c[n])}" for n in varying if n != c["axis"])]
             for _, c in crossovers.sort_values(["axis", *varying]).iterrows()]
    more = ["", f"{len(lines) - limit} more in crossovers.csv."] if len(lines) > limit else []
    return [*md_lines(["axis", "bracket", "width %", "status", "winner low → high", "on"], lines[:limit]), *more]


def crossover_counts(crossovers: pd.DataFrame) -> str:
    return ", ".join(f"{n} {s}" for s, n in crossovers["status"].value_counts().items())


def crossovers_section(crossovers: pd.DataFrame, ranges: list) -> list[str]:
    if crossovers.empty:
        return ["## Crossovers", "", "No two neighbouring cells have different winners.", ""]
    return ["## Crossovers", "", f"Edges between neighbouring cells whose winners differ: "
            f"{crossover_counts(crossovers)}. located: the bracket is within "
            f"{TOLERANCE:.0%} of its middle; resolution: no value a batch holds lies between; open: the cell "
            "budget ended first; tie: both ends are ties, not refined.", "",
            *crossovers_table(crossovers, ranges, MAX_LINES), ""]


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


CONSOLE_LINES = 10  # crossovers the console lists; summary.md lists MAX_LINES, crossovers.csv all


def choice_times(cells: pd.DataFrame) -> list[str]:
    """Per choice: the cells it passed on and its median ms over them, lowest to highest (markdown)."""
    lines = []
    for column in (c for c in cells.columns if c.endswith(" ms")):
        choice = column.removesuffix(" ms")
        ms = cells.loc[cells[f"{choice} passed"] == True, column].astype(float)  # noqa: E712  (NaN: not measured)
        lines.append([choice, f"{len(ms)} of {len(cells)}", f"{ms.min():.4g} – {ms.max():.4g}" if len(ms) else "—"])
    return md_lines(["choice", "cells passed", "median ms, lowest – highest cell"], lines)


def headline(cells: pd.DataFrame, crossovers: pd.DataFrame, ranges: list, cpu: bool) -> list[str]:
    """What the console ends with: the cells, then who wins them and where the winner changes (the
    first crossovers); a CPU run's cells name none, so it shows each choice's times and says why."""
    if cpu:
        return [f"{len(cells)} cells ({CPU_MARK}: no cell is judged, nothing refined)", *choice_times(cells)]
    out = [f"{len(cells)} cells", *(winners_table(cells) or ["no cell has a winner"])]
    if crossovers.empty:
        return [*out, "no two neighbouring cells have different winners"]
    located = int((crossovers["status"] != "open").sum())
    return [*out, f"crossovers: {len(crossovers)} edge(s) where the winner changes ({crossover_counts(crossovers)}), "
            f"{located} located", *crossovers_table(crossovers, ranges, CONSOLE_LINES)]
