"""Cells of an atlas that are the same step are measured once, and every such cell gets its rows.

Why: a decode-only step (decode share 1) does not read the prefill axes and a prefill-only one
(share 0) the decode context, so on a grid over those axes a large share of the cells repeat a
step; refinement along two such lines repeats it again. A round measures one cell per step it has
not measured before (`plan_round`), and each other cell of that step gets copies of its rows
(`copy_row`): its own coordinates, point and batch columns, and in `measured_as` the coordinates
of the cell measured. So results.csv and cells.csv still hold every cell, a resume reads them as
it reads measured cells, and the copies say what they are.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from attnbench.kernels.atlas_axes import CellShape, Coord, cell_point, step_of
from attnbench.kernels.rows import BatchColumns
from attnbench.results.atlas_cells import CELL_COLUMNS, MEASURED_AS, coord_of, describe


@dataclass(frozen=True)
class RoundPlan:
    """A round's cells: those to measure, and each other cell with the cell whose rows it copies
    (one measured this round or earlier)."""

    measure: list
    copies: dict


def measured_rows(rows: list[dict], heads: int) -> dict[Coord, list[dict]]:
    """The rows of each cell measured so far (not copied), by cell, in the order they were saved."""
    found: dict[Coord, list[dict]] = {}
    for row in rows:
        if not row.get(MEASURED_AS):
            found.setdefault(coord_of(row, heads, "results.csv"), []).append(row)
    return found


def plan_round(coords: list[Coord], measured) -> RoundPlan:
    """One cell per step not `measured` before, in the round's order; every other cell copies."""
    first: dict[tuple, Coord] = {}
    for coord in measured:
        first.setdefault(step_of(coord), coord)
    todo, copies = [], {}
    for coord in coords:
        source = first.setdefault(step_of(coord), coord)
        if source == coord:
            todo.append(coord)
        else:
            copies[coord] = source
    return RoundPlan(todo, copies)


def copy_row(row: dict, cell: Coord, source: Coord, shape: CellShape, round_number: int) -> dict:
    """`source`'s row as `cell`'s: the cell's round, coordinates, point and batch; measured_as names the source."""
    point = cell_point(cell, shape)
    return {**row, **point.key(), **asdict(BatchColumns.of(point.given)), "round": round_number,
            **dict(zip(CELL_COLUMNS, cell)), MEASURED_AS: describe(source)}
