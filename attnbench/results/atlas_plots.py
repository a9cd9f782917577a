"""An atlas's pictures: winner maps over two axes at a time, and margin curves across its crossovers.

Why these two: a map answers "who wins where" at a glance: its cells fill the panel, a column per
value measured, colour = the winner's strategy and marker = its backend (styles.py, as in every
picture), shade = margin (pale where the two best are close), ties hatched, and each cell's best
time written at a size its cell holds; a curve across a crossover shows how sharp it is
(each choice's time over the cell's best along the line through it, the bracket shaded). Titles,
legend and save follow results/figures.py, so a PNG read alone names its GPU, libraries and mode,
and a CPU run says it is a pipeline demo.
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.colors import LogNorm, to_rgb
from matplotlib.patches import Rectangle
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from attnbench.kernels.atlas_axes import AXES, BY_NAME, NAMES
from attnbench.results.figures import PLAIN, finish, panels, settings_text, title
from attnbench.results.styles import Styles, backend_marker, choice_colour, split_choice, strategy_colour

MAX_PANELS = 9
MAX_TICKS = 8  # tick labels an axis writes at most
SETTINGS = [("mode", ""), ("num_heads", "heads"), ("num_kv_heads", "kv heads"), ("dtype", "")]  # the title's second line
TIMES = colormaps["viridis"]  # the best time's colours, where no cell has a winner


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
    fig.subplots_adjust(left=0.8 / w, right=1 - 0.2 / w, top=1 - 0.85 / h, bottom=0.6 / h, wspace=0.35, hspace=0.5)
    return fig, axes


def _shade(margin) -> float:
    """How much of the winner's colour a cell takes: 0.3 where the second best is within a hair,
    full at a 1.5x margin and beyond; a cell without a margin (one choice passed) halfway."""
    if margin is None or pd.isna(margin):
        return 0.6
    return float(min(1.0, max(0.3, 0.3 + 0.7 * (float(margin) - 1.0) / 0.5)))


def _tint(colour: str, margin) -> np.ndarray:
    """`colour` mixed with white by the margin's shade."""
    return 1 - _shade(margin) * (1 - np.array(to_rgb(colour)))


def _grid_axis(ax, name: str, values: list, which: str) -> None:
    """A map's axis: one column (row) per value measured, labelled with the value (at most MAX_TICKS)."""
    side = ax.xaxis if which == "x" else ax.yaxis
    picked = list(range(len(values)))[::max(1, -(-len(values) // MAX_TICKS))]
    side.set_major_locator(FixedLocator(picked))
    side.set_major_formatter(FuncFormatter(lambda v, _: f"{values[int(round(v))]:g}" if 0 <= v < len(values) else ""))
    side.set_minor_locator(NullLocator())
    (ax.set_xlabel if which == "x" else ax.set_ylabel)(f"{name} ({BY_NAME[name].meaning})", fontsize=8)


def _cell_points(ax, nx: int, ny: int) -> float:
    """The side of a cell, in points, from the panel's size (its margins are fixed: _panels)."""
    box = ax.get_position()
    return min(box.width * ax.figure.get_figwidth() / nx, box.height * ax.figure.get_figheight() / ny) * 72


def _draw_grid(ax, part: pd.DataFrame, x: str, y: str, norm=None) -> bool:
    """The panel's cells filling it, a column per x value and a row per y value: the winner's
    strategy colour, its backend's marker in the middle, the best time under it where the cell
    holds it at a readable size. With `norm` (no cell of the map has a winner: a CPU run), the
    colour is the best time's on TIMES instead. True when times were written."""
    xs, ys = sorted(set(part[x])), sorted(set(part[y]))
    grid = np.tile(np.array(to_rgb("whitesmoke")), (len(ys), len(xs), 1))
    best = part[[c for c in part.columns if c.endswith(" ms")]].astype(float).min(axis=1)
    side = _cell_points(ax, len(xs), len(ys))
    text_size, written = min(9.0, side / 4.2), False
    for (_, cell), fastest in zip(part.iterrows(), best):
        i, j = xs.index(cell[x]), ys.index(cell[y])
        if norm is not None:
            grid[j, i] = TIMES(norm(fastest))[:3] if pd.notna(fastest) else to_rgb("lightgray")
        else:
            grid[j, i] = _tint(choice_colour(cell["winner"]), cell["margin"]) if isinstance(cell["winner"], str) \
                else to_rgb("lightgray")
        if cell["tie"] is True:
            ax.add_patch(Rectangle((i - 0.5, j - 0.5), 1, 1, fill=False, hatch="//", edgecolor="dimgray", linewidth=0))
        ink = "white" if sum(grid[j, i] * (0.3, 0.6, 0.1)) < 0.45 else "black"  # readable on dark cells
        if isinstance(cell["winner"], str) and side >= 9:
            ax.plot([i], [j + (0.17 if text_size >= 5 else 0)], linestyle="none", color=ink,
                    marker=backend_marker(split_choice(cell["winner"])[0]), markersize=min(9.0, side * 0.3))
        if text_size >= 5 and pd.notna(fastest):
            ax.text(i, j - 0.2 if isinstance(cell["winner"], str) else j, f"{fastest:.3g}", fontsize=text_size,
                    ha="center", va="center", color=ink)
            written = True
    ax.imshow(grid, origin="lower", aspect="auto", interpolation="nearest",
              extent=(-0.5, len(xs) - 0.5, -0.5, len(ys) - 0.5))
    _grid_axis(ax, x, xs, "x")
    _grid_axis(ax, y, ys, "y")
    ax.tick_params(labelsize=7)
    return written


def _time_scale(cells: pd.DataFrame):
    """A log scale of the best times when no cell has a winner (else None: colour says the winner)."""
    if any(isinstance(w, str) for w in cells["winner"]):
        return None
    best = cells[[c for c in cells.columns if c.endswith(" ms")]].astype(float).min(axis=1).dropna()
    best = best[best > 0]
    return LogNorm(best.min(), max(best.max(), best.min() * 1.01)) if len(best) else None


def _keys(ax, cells: pd.DataFrame) -> None:
    """Legend entries (empty artists): each winning strategy's colour at full and pale margin,
    each winning backend's marker, the hatch of a tie."""
    winners = sorted({w for w in cells["winner"] if isinstance(w, str)})
    for strategy in dict.fromkeys(split_choice(w)[1] for w in winners):
        for margin, said in ((1.5, "1.5x or more"), (1.02, "a hair")):
            ax.add_patch(Rectangle((0, 0), 0, 0, color=_tint(strategy_colour(strategy), margin),
                                   label=f"{strategy} wins by {said}"))
    for backend in dict.fromkeys(split_choice(w)[0] for w in winners):
        ax.plot([], [], linestyle="none", marker=backend_marker(backend), color="black", label=f"{backend} wins")
    if (cells["tie"] == True).any():  # noqa: E712  (None: no verdict)
        ax.add_patch(Rectangle((0, 0), 0, 0, facecolor="white", edgecolor="dimgray", hatch="//", label="tie"))


def map_figure(cells: pd.DataFrame, x: str, y: str, others: list[str], rows: pd.DataFrame, path: Path) -> Path:
    parts = [(values, _part(cells, dict(zip(others, values)))) for values in _slices(cells, others)]
    columns = max(part[x].nunique() for _, part in parts)
    lines = max(part[y].nunique() for _, part in parts)
    # a panel sized by its grid: a cell of about half an inch, however few or many the axes hold
    fig, axes = _panels(len(parts), width=min(7.5, max(4.4, 0.5 * columns + 1.4)),
                        height=min(6.5, max(3.0, 0.42 * lines + 1.5)))
    written, norm = False, _time_scale(cells)
    for ax, (values, part) in zip(axes, parts):
        written |= _draw_grid(ax, part, x, y, norm)
        # a fixed y: matplotlib's search for room above each panel's ticks is a tenth of the drawing time
        ax.set_title(", ".join(f"{n} {v:g}" for n, v in zip(others, values)) or "all cells", fontsize=8, y=1.0)
    if norm is None:
        _keys(axes[0], cells)
        said = ("colour: the strategy of the fastest passing backend x strategy, marker: its backend; shade: its "
                "margin over the second best (pale: within a few %, full: 1.5x or more); grey: no winner")
    else:
        said = "no cell has a winner (no verdict): colour is the best time (log scale, dark: fastest)"
    heading = title(f"Winner by {x} and {y}" if norm is None else f"Best time by {x} and {y}", rows,
                    settings_text(rows, SETTINGS), said + ("; number: the best time, ms" if written else ""))
    return finish(fig, axes, heading, path)


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
    style = Styles()
    lines = _lines(cells, crossovers, varying)
    fig, axes = _panels(len(lines), width=4.8, height=3.6)
    for ax, (axis, fixed) in zip(axes, lines):
        line = _part(cells, fixed).sort_values(axis)
        times = line[[f"{c} ms" for c in choices]].astype(float)
        best = times.min(axis=1)
        for choice in choices:
            ax.plot(line[axis], times[f"{choice} ms"] / best, **{**style.choice(choice), "markersize": 4})
        for _, edge in crossovers[crossovers["axis"] == axis].iterrows():
            if all(edge[n] == v for n, v in fixed.items()):
                ax.axvspan(edge["low"], edge["high"], color="gold", alpha=0.4)
        _scale(ax, axis, line[axis], "x")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_ylabel("time over the cell's best", fontsize=8)
        ax.set_title(", ".join(f"{n} {v:g}" for n, v in fixed.items() if n in varying) or axis, fontsize=8, y=1.0)
    note = "gold: the bracket a crossover lies in" if not crossovers.empty else "no crossover: lines along each axis"
    heading = title("Each choice over the best, across the crossovers", rows,
                    settings_text(rows, SETTINGS), note)
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
