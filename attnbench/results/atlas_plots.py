"""An atlas's pictures: winner maps over two axes at a time, and margin curves across its crossovers.

Why these two: a map answers "who wins where" at a glance (colour = winner, shade = margin: pale
where the two best are close, ties hatched); a curve across a crossover shows how sharp it is
(each choice's time over the cell's best along the line through it, the bracket shaded). Titles,
legend and save follow results/figures.py, so a PNG read alone names its GPU, libraries and mode,
and a CPU run says it is a pipeline demo.
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path
from typing import Callable

import pandas as pd
from matplotlib.colors import to_rgba_array
from matplotlib.ticker import FixedLocator, NullLocator

from attnbench.kernels.atlas_axes import AXES, BY_NAME, NAMES
from attnbench.results.figures import PLAIN, Palette, finish, panels, settings_text, title

MAX_PANELS = 9
MAX_TICKS = 8  # tick labels an axis writes at most
MAX_LABELLED = 60  # a map of at most this many cells writes each cell's best time in it
NO_WINNER = "no winner"


def _scale(ax, name: str, values, which: str) -> None:
    """The axis's scale, ticked at the values drawn (at most MAX_TICKS of them, evenly picked) with no
    minor ticks: tick labels are most of what a panel costs to lay out and draw."""
    axis = BY_NAME[name]
    setter, side = (ax.set_xscale, ax.xaxis) if which == "x" else (ax.set_yscale, ax.yaxis)
    if axis.scale == "log":
        setter("symlog", linthresh=1) if min(values) <= 0 else setter("log", base=2)
    ticks = sorted(set(values))
    side.set_major_locator(FixedLocator(ticks[::max(1, -(-len(ticks) // MAX_TICKS))]))
    side.set_major_formatter(PLAIN)
    side.set_minor_locator(NullLocator())
    (ax.set_xlabel if which == "x" else ax.set_ylabel)(f"{name} ({axis.meaning})", fontsize=8)


def _slices(cells: pd.DataFrame, others: list[str]) -> list[tuple]:
    """The other varying axes' value combinations that hold more than one cell (with none, as a
    stopped atlas may have: those that hold one), at most MAX_PANELS, evenly picked."""
    if not others:
        return [()]
    counts = cells.groupby(others).size()
    found = [k if isinstance(k, tuple) else (k,) for k, n in counts.items() if n > 1] or \
        [k if isinstance(k, tuple) else (k,) for k in counts.index]
    step = max(1, -(-len(found) // MAX_PANELS))
    return found[::step][:MAX_PANELS]


def _part(cells: pd.DataFrame, fixed: dict) -> pd.DataFrame:
    """The cells at the `fixed` coordinates."""
    keep = pd.Series(True, index=cells.index)
    for name, value in fixed.items():
        keep &= cells[name] == value
    return cells[keep]


def _panels(count: int, width: float, height: float):
    """results/figures.py's panels with fixed margins, in inches: its constrained layout measures
    every tick label of every panel twice, most of the time a large atlas's maps take to draw."""
    fig, axes = panels(count, width, height, layout=None)
    w, h = fig.get_figwidth(), fig.get_figheight()
    fig.subplots_adjust(left=0.8 / w, right=1 - 0.2 / w, top=1 - 1.2 / h, bottom=1.1 / h, wspace=0.35, hspace=0.45)
    return fig, axes


def _shade(margin) -> float:
    """Opacity from the margin: pale near 1.0, full at 1.5x and beyond."""
    if margin is None or pd.isna(margin):
        return 0.35
    return float(min(1.0, max(0.25, (float(margin) - 1.0) / 0.5)))


def _draw_cells(ax, part: pd.DataFrame, x: str, y: str, colour: Palette) -> None:
    """The panel's cells as one scatter per winner and tie (each cell's shade its own alpha), not
    one artist per cell."""
    winner = part["winner"].where(part["winner"].map(lambda w: isinstance(w, str)), NO_WINNER)
    tie = part["tie"].map(lambda t: t is True)
    for (name, tied), group in part.groupby([winner, tie], sort=True):
        face = to_rgba_array(["lightgray" if name == NO_WINNER else colour(name)] * len(group))
        face[:, 3] = [_shade(m) for m in group["margin"]]
        ax.scatter(group[x], group[y], s=420, marker="s", c=face, edgecolors="black" if tied else "none",
                   hatch="////" if tied else None, linewidths=0.5, label=name)


def map_figure(cells: pd.DataFrame, x: str, y: str, others: list[str], rows: pd.DataFrame, path: Path) -> Path:
    colour = Palette()
    parts = [(values, _part(cells, dict(zip(others, values)))) for values in _slices(cells, others)]
    labelled = sum(len(part) for _, part in parts) <= MAX_LABELLED
    fig, axes = _panels(len(parts), width=4.8, height=4.0)
    for ax, (values, part) in zip(axes, parts):
        best = part[[c for c in part.columns if c.endswith(" ms")]].astype(float).min(axis=1)
        _draw_cells(ax, part, x, y, colour)
        if labelled:
            for px, py, fastest in zip(part[x], part[y], best):
                if pd.notna(fastest):
                    ax.annotate(f"{fastest:.3g}", (px, py), fontsize=6, ha="center", va="center")
        _scale(ax, x, part[x], "x")
        _scale(ax, y, part[y], "y")
        # a fixed y: matplotlib's search for room above each panel's ticks is a tenth of the drawing time
        ax.set_title(", ".join(f"{n} {v:g}" for n, v in zip(others, values)) or "all cells", fontsize=8, y=1.0)
    if (cells["tie"] == True).any():  # noqa: E712  (None: no verdict)
        axes[0].scatter([], [], s=120, marker="s", color="white", edgecolors="black", hatch="////",
                        label="tie (hatched)")
    heading = title(f"Winner by {x} and {y}", rows, settings_text(rows, [("dtype", ""), ("mode", "")]),
                    "colour: the fastest passing backend x strategy; shade: its margin (pale: second-best "
                    "within a few %, full: 1.5x or more)" + ("; number: the best time, ms" if labelled else ""))
    return finish(fig, axes, heading, path, markerscale=0.45)


def _lines(cells: pd.DataFrame, crossovers: pd.DataFrame, varying: list[str]) -> list[tuple[str, dict]]:
    """(axis, fixed coordinates) of each line holding a crossover, once however many it holds,
    located ones first; with none, the line along each varying axis through the first cell."""
    if crossovers.empty:
        first = cells.iloc[0]
        return [(a, {n: first[n] for n in NAMES if n != a}) for a in varying]
    ordered = crossovers.sort_values("status", key=lambda s: s != "located", kind="stable")
    lines = {(c["axis"], tuple((n, c[n]) for n in NAMES if n != c["axis"])): None for _, c in ordered.iterrows()}
    return [(axis, dict(fixed)) for axis, fixed in lines][:MAX_PANELS]  # a line with several crossovers: one panel


def margin_figure(cells: pd.DataFrame, crossovers: pd.DataFrame, varying: list[str], rows: pd.DataFrame,
                  path: Path) -> Path:
    choices = [c[:-3] for c in cells.columns if c.endswith(" ms")]
    colour = Palette()
    lines = _lines(cells, crossovers, varying)
    fig, axes = _panels(len(lines), width=4.8, height=3.6)
    for ax, (axis, fixed) in zip(axes, lines):
        line = _part(cells, fixed).sort_values(axis)
        times = line[[f"{c} ms" for c in choices]].astype(float)
        best = times.min(axis=1)
        for choice in choices:
            ax.plot(line[axis], times[f"{choice} ms"] / best, marker="o", markersize=3, color=colour(choice),
                    label=choice)
        for _, edge in crossovers[crossovers["axis"] == axis].iterrows():
            if all(edge[n] == v for n, v in fixed.items()):
                ax.axvspan(edge["low"], edge["high"], color="gold", alpha=0.4)
        _scale(ax, axis, line[axis], "x")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_ylabel("time over the cell's best", fontsize=8)
        ax.set_title(", ".join(f"{n} {v:g}" for n, v in fixed.items() if n in varying) or axis, fontsize=8, y=1.0)
    note = "gold: the bracket a crossover lies in" if not crossovers.empty else "no crossover: lines along each axis"
    heading = title("Each choice over the best, across the crossovers", rows,
                    settings_text(rows, [("dtype", ""), ("mode", "")]), note)
    return finish(fig, axes, heading, path)


def pictures(cells: pd.DataFrame, crossovers: pd.DataFrame, ranges: list, rows: pd.DataFrame,
             out_dir: Path) -> list[tuple[Path, Callable[[], Path]]]:
    """Each picture's path with what draws it: atlas_map_<x>_<y>.png for every pair of varying axes
    (one axis alone: against tokens or the first fixed axis), and atlas_margins.png. Named before
    any is drawn, so a run directory records them (and a leftover temporary file) first."""
    varying = [a.name for a, r in zip(AXES, ranges) if r.varies]
    pairs = list(itertools.combinations(varying, 2)) or [(varying[0], next(n for n in NAMES if n != varying[0]))]
    found = [(out_dir / f"atlas_map_{x}_{y}.png", functools.partial(
        map_figure, cells, x, y, [n for n in varying if n not in (x, y)], rows, out_dir / f"atlas_map_{x}_{y}.png"))
        for x, y in pairs]
    margins = out_dir / "atlas_margins.png"
    return found + [(margins, functools.partial(margin_figure, cells, crossovers, varying, rows, margins))]


def plot_atlas(cells: pd.DataFrame, crossovers: pd.DataFrame, ranges: list, rows: pd.DataFrame,
               out_dir: Path) -> list[Path]:
    """Every picture of `pictures`, drawn."""
    return [draw() for _, draw in pictures(cells, crossovers, ranges, rows, out_dir)]
