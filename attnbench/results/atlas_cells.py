"""An atlas's rows as cells (winner, margin, interval, tie) and its crossovers as a table.

Why here: a cell's verdict is made from the rows the kernel sweep wrote, with the interval compare
already gives a pair of rows (results/compare.py `judge`: Welch's t over replicate medians, else a
bootstrap over one run's samples, else p10-p90), so an atlas's "tie" means what `attnbench
compare`'s "noisy" means. A cell's **winner** is its fastest choice (a backend with a strategy)
that passed its check, its **margin** the second-best passing time over the best, its
**interval** that ratio's interval; a **tie** is an interval that reaches 1 (the two best cannot
be told apart). A cell with under two passing choices has no margin; one with none, no winner.
On the CPU only the reference backend runs: its cells name no winner and give no verdict.
"""

from __future__ import annotations

import math

import pandas as pd

from attnbench.errors import AttnbenchError
from attnbench.kernels.atlas_axes import AXES, NAMES, Coord, Range, cell_batch
from attnbench.results.atlas_refine import Edge, CellOutcome, edges
from attnbench.results.compare import judge

# before the kernel sweep's columns in results.csv: the cell's round and coordinates (prefixed: the
# sweep has a decode_share and a head_dim of its own), and, for a cell that is the same step as one
# measured, that cell's coordinates (its rows are copies of that cell's)
CELL_COLUMNS = tuple(f"cell_{name}" for name in NAMES)
MEASURED_AS = "measured_as"
ATLAS_COLUMNS = ["round", *CELL_COLUMNS, MEASURED_AS]
VERDICT_COLUMNS = ["winner", "second", "margin", "interval_low", "interval_high", "interval", "tie"]


def coord_of(row: dict, heads: int, where: str) -> Coord:
    """A row's cell coordinates, each a value its axis can hold; AttnbenchError naming the row otherwise."""
    values = []
    for axis, column in zip(AXES, CELL_COLUMNS):
        try:
            value = float(row[column])
        except (KeyError, TypeError, ValueError):
            raise AttnbenchError(f"{where} has no number in {column}: {row.get(column)!r}") from None
        if not math.isfinite(value) or axis.snap(value, heads) != value:
            raise AttnbenchError(f"{where} has {column} {row[column]}, which is no {axis.meaning} a cell holds")
        values.append(axis.snap(value, heads))
    return tuple(values)


def describe(coord: Coord) -> str:
    """A cell's coordinates as measured_as names them: 'decode_share=1 decode_context=512 ...'."""
    return " ".join(f"{name}={value:g}" for name, value in zip(NAMES, coord))


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def choice_of(rows: pd.DataFrame) -> pd.Series:
    return rows["backend"].astype(str) + " " + rows["strategy"].astype(str)


def cell_table(rows: pd.DataFrame, heads: int, cpu: bool) -> pd.DataFrame:
    """cells.csv: a line per cell (its coordinates, kind, decode rows, prefill tokens, round and the
    cell it shares a measurement with), each choice's median ms and whether it passed, then the
    verdict columns (blank on the CPU). Each cell's rows are read as plain records: indexing a
    DataFrame per cell and choice took most of a large atlas's seconds after an interrupt."""
    rows = rows.assign(choice=choice_of(rows),  # timed: not a point that failed as a whole
                       timed=rows["strategy"].notna() & (rows["strategy"].astype(str) != ""))
    choices = sorted(rows.loc[rows["timed"], "choice"].unique())
    by_cell: dict[tuple, list[dict]] = {}
    for record in rows.to_dict("records"):
        by_cell.setdefault(tuple(record[c] for c in CELL_COLUMNS), []).append(record)
    lines = []
    for _, records in sorted(by_cell.items()):
        first = records[0]
        coord = coord_of(first, heads, "results.csv")
        batch = cell_batch(coord)
        line = {**dict(zip(NAMES, coord)), "kind": first["kind"], "decode_rows": batch.num_decode_seqs,
                "prefill_tokens": batch.num_tokens - batch.num_decode_seqs, "round": int(first["round"]),
                MEASURED_AS: _text(first.get(MEASURED_AS))}
        timed = {}
        for record in records:
            if record["timed"]:
                timed.setdefault(record["choice"], record)
        for choice in choices:
            passed = choice in timed and timed[choice]["verdict"] == "pass"
            line[f"{choice} ms"] = float(timed[choice]["median_ms"]) if passed else math.nan
            line[f"{choice} passed"] = passed
        passing = [r for r in records if r["timed"] and r["verdict"] == "pass"]
        lines.append({**line, **({} if cpu else verdict(passing))})
    table = pd.DataFrame(lines)
    for column in VERDICT_COLUMNS:
        if column not in table:
            table[column] = None
    return table


def verdict(passing: list[dict]) -> dict:
    """winner, second, margin (second / best), its interval and whether it is a tie."""
    if not passing:
        return {}
    best, *others = sorted(passing, key=lambda r: float(r["median_ms"]))
    if not others:
        return {"winner": best["choice"]}
    second = others[0]
    judged = judge({**best, "median_ms": float(best["median_ms"])}, {**second, "median_ms": float(second["median_ms"])},
                   0.0)
    return {"winner": best["choice"], "second": second["choice"], "margin": judged["ratio"],
            "interval_low": judged["ci_low"], "interval_high": judged["ci_high"], "interval": judged["method"],
            "tie": bool(judged["ci_low"] <= 1.0)}


def outcomes(table: pd.DataFrame) -> dict[Coord, CellOutcome]:
    """What refinement reads of each cell."""
    found = {}
    for line in table.to_dict("records"):
        winner = line.get("winner")
        found[tuple(line[n] for n in NAMES)] = CellOutcome(winner if isinstance(winner, str) and winner else None,
                                                       line.get("tie") is True)
    return found


def crossover_table(ranges: list[Range], cells: dict[Coord, CellOutcome], heads: int) -> pd.DataFrame:
    """crossovers.csv: each edge (axis, bracket, its width in percent of its middle, status, the
    winner and tie on each side) and the coordinates it lies on (its own axis blank)."""
    lines = []
    for edge in edges(ranges, cells, heads):
        lines.append(edge_line(edge, cells))
    columns = ["axis", "low", "high", "width_pct", "status", "winner_low", "winner_high", "tie_low", "tie_high",
               *NAMES]
    return pd.DataFrame(lines, columns=columns)


def edge_line(edge: Edge, cells: dict[Coord, CellOutcome]) -> dict:
    a, low, high = edge.axis, edge.low[edge.axis], edge.high[edge.axis]
    middle = (low + high) / 2
    return {"axis": AXES[a].name, "low": low, "high": high,
            "width_pct": round((high - low) / middle * 100, 2) if middle else math.nan, "status": edge.status,
            "winner_low": cells[edge.low].winner, "winner_high": cells[edge.high].winner,
            "tie_low": cells[edge.low].tie, "tie_high": cells[edge.high].tie,
            **{n: (None if i == a else edge.low[i]) for i, n in enumerate(NAMES)}}
