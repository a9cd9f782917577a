"""The picture of a fitted rule: the regret of the rule beside every static choice, per scope.

Why a bar per chooser: the question a serving engine asks is "what does each way of choosing
cost against the oracle?", and the answer is one number per chooser; a panel per scope (all
cells, each replayed trace) shows whether the rule's edge holds on the traces. Title, legend and
save follow results/figures.py, so the PNG read alone says which GPU and libraries it holds for.
"""

from __future__ import annotations

import math
from pathlib import Path

from attnbench.results.figures import finish, panels, settings_text, shape_text, title
from attnbench.results.rule_cells import Cells
from attnbench.results.rule_report import Line
from attnbench.results.styles import choice_colour

RULE_COLOUR = "dimgray"  # the rule picks per cell: no one strategy's colour
ZERO = 0.005  # of the widest bar: a bar this short is a line no one sees, so a marker stands in for it


def _looks(line: Line) -> tuple[str, str]:
    """(colour, hatch) of a chooser's bar: the rule grey, a single choice its strategy's colour,
    the best single choice and the engines' defaults hatched."""
    if line.name.startswith("rule"):
        return RULE_COLOUR, ""
    return choice_colour(line.choice), "//" if "default" in line.name or line.name.startswith("best") else ""


def _panel(ax, scope: str, lines: list[Line]) -> None:
    shown = [l for l in lines[1:] if not math.isnan(l.regret_pct)]
    looks = [_looks(l) for l in shown]
    bars = ax.barh(range(len(shown)), [l.regret_pct for l in shown], color=[c for c, _ in looks],
                   hatch=[h for _, h in looks], edgecolor="white")
    widest = max([abs(l.regret_pct) for l in shown], default=0.0)
    for y, (line, (colour, _)) in enumerate(zip(shown, looks)):
        if abs(line.regret_pct) <= ZERO * widest or widest == 0:  # no regret: a dot on 0, not an empty row
            ax.plot([0.0], [y], marker="D", markersize=6, color=colour, markeredgecolor="black", zorder=4)
    ax.bar_label(bars, [f"{l.regret_pct:.1f} %" for l in shown], fontsize=7, padding=7)
    ax.set_yticks(range(len(shown)), [l.name if l.name != "always" else f"always {l.choice}" for l in shown],
                  fontsize=7)
    ax.set_xlim(-0.04 * (widest or 1.0), 1.15 * (widest or 1.0))  # room for the dot at 0 and the labels
    ax.invert_yaxis()
    ax.set_xlabel("regret over the per-cell oracle, %")
    ax.set_title(scope, fontsize=9, parse_math=False)  # a trace's name is the run's text, not mathtext


def plot_rule(cells: Cells, tables: dict[str, list[Line]], path: Path) -> Path:
    """rule_regret.png: a horizontal bar of regret % per chooser, one panel per scope."""
    fig, axes = panels(len(tables), width=6.4, height=0.32 * max(len(t) for t in tables.values()) + 1.2)
    for ax, (scope, lines) in zip(axes, tables.items()):
        _panel(ax, scope, lines)
    shapes = "; ".join(shape_text(*shape) for shape in cells.shapes)
    about = cells.about.map(lambda v: v.replace("$", r"\$") if isinstance(v, str) else v)  # a GPU name likewise
    heading = title("Dispatch rule vs static choices" + (f", {shapes}" if shapes else ""), about,
                    settings_text(about, [("mode", ""), ("dtype", "")]),
                    "grey: the rule; a single choice: its strategy's colour (unified blue, split orange); hatched: the "
                    "best single choice and the engines' defaults; a diamond: no regret")
    return finish(fig, axes, heading, path)
