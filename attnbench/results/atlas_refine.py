"""Where an atlas measures next: a pure function of the cells measured so far.

Why pure: the refinement is the part of an atlas that decides what the GPU spends its minutes on,
and it must be testable without one (a fake `measure` with known crossovers) and resumable (the
cells already in results.csv decide the next ones, so a resumed atlas asks for exactly what an
uninterrupted one would have asked for next, and nothing twice).

The rule: a coarse grid first (each varying axis at its LOW:HIGH:COUNT values, spaced in the
axis's own scale). Then, along every varying axis, two measured cells that share every other
coordinate, with no measured cell between them, whose winners differ, are an **edge**; an open
edge is bisected in the axis's scale (a new cell at its midpoint), until its bracket is within
TOLERANCE of its coordinate (`located`) or no value a batch can hold lies between (`resolution`).
An edge both of whose cells are ties is not refined (`tie`): their winners may differ by noise
alone; two cells that are the same step (a decode-only step along a prefill axis) are no edge. The widest brackets are measured first, so a cell budget that ends leaves the narrowest open.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable

from attnbench.kernels.atlas_axes import AXES, TOLERANCE, Coord, Range, same_step


@dataclass(frozen=True)
class CellOutcome:
    """What refinement needs of a measured cell: its winner (None: no winner) and whether the two
    best could not be told apart."""

    winner: str | None
    tie: bool = False


@dataclass(frozen=True)
class Edge:
    """Two neighbouring cells along `axis` whose winners differ; status: open, located, resolution, tie."""

    axis: int
    low: Coord
    high: Coord
    status: str


def coarse_grid(ranges: list[Range], heads: int) -> list[Coord]:
    """Every combination of each axis's coarse values (ranges in AXES order)."""
    values = [axis.spaced(r.low, r.high, r.count, heads) for axis, r in zip(AXES, ranges)]
    return list(itertools.product(*values))


def edges(ranges: list[Range], cells: dict[Coord, CellOutcome], heads: int) -> list[Edge]:
    """Every edge of the measured cells, along each varying axis, in a stable order."""
    found = []
    for a, (axis, r) in enumerate(zip(AXES, ranges)):
        if not r.varies:
            continue
        lines: dict[Coord, list[Coord]] = {}
        for coord in cells:
            lines.setdefault(coord[:a] + coord[a + 1:], []).append(coord)
        for line in sorted(lines):
            ordered = sorted(lines[line], key=lambda c: c[a])
            for low, high in zip(ordered, ordered[1:]):
                one, two = cells[low], cells[high]
                if one.winner is None or two.winner is None or one.winner == two.winner or same_step(low, high):
                    continue
                found.append(Edge(a, low, high, _status(axis, low[a], high[a], one.tie and two.tie, heads)))
    return found


def _status(axis, low: float, high: float, both_tie: bool, heads: int) -> str:
    if both_tie:
        return "tie"
    if axis.located(low, high):
        return "located"
    middle = axis.midpoint(low, high, heads)
    return "open" if low < middle < high else "resolution"


def midpoint(edge: Edge, heads: int) -> Coord:
    a = edge.axis
    return edge.low[:a] + (AXES[a].midpoint(edge.low[a], edge.high[a], heads),) + edge.low[a + 1:]


def next_cells(ranges: list[Range], cells: dict[Coord, CellOutcome], heads: int) -> list[Coord]:
    """The midpoints of the open edges, widest bracket (in its axis's scale, over the axis's span)
    first, each once."""
    def width(edge: Edge) -> float:
        axis, r = AXES[edge.axis], ranges[edge.axis]
        span = axis.position(r.high) - axis.position(r.low)
        return (axis.position(edge.high[edge.axis]) - axis.position(edge.low[edge.axis])) / span

    open_edges = sorted((e for e in edges(ranges, cells, heads) if e.status == "open"),
                        key=lambda e: (-width(e), e.low))
    return list(dict.fromkeys(c for c in (midpoint(e, heads) for e in open_edges) if c not in cells))


@dataclass(frozen=True)
class Exploration:
    """The cells measured (earlier ones included), the rounds this call ran, and why it stopped."""

    cells: dict
    rounds: int
    stop: str


def explore(ranges: list[Range], heads: int, measured: dict[Coord, CellOutcome],
            measure: Callable[[list[Coord]], dict[Coord, CellOutcome]], max_cells: int) -> Exploration:
    """Coarse grid, then rounds of refinement; `measure` takes a round's cells and returns their
    outcomes. Stops when no edge is open or `max_cells` cells are measured."""
    cells = dict(measured)
    todo = [c for c in coarse_grid(ranges, heads) if c not in cells] or next_cells(ranges, cells, heads)
    rounds = 0
    while todo:
        room = max_cells - len(cells)
        if room <= 0:
            left = len([e for e in edges(ranges, cells, heads) if e.status == "open"])
            return Exploration(cells, rounds, f"the cell budget ({max_cells} cells) ended with {len(todo)} cell(s) "
                                              f"unmeasured ({left} crossover(s) still open)")
        got = measure(todo[:room])
        if not got:
            return Exploration(cells, rounds, "a round measured no cell")
        cells.update(got)
        rounds += 1
        todo = next_cells(ranges, cells, heads)
    if not any(o.winner for o in cells.values()):
        return Exploration(cells, rounds, "no cell has a winner, so nothing was refined")
    return Exploration(cells, rounds, f"every crossover is located within {TOLERANCE:.0%} of its coordinate "
                                      "(or at its axis's resolution)")
