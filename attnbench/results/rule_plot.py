"""The picture of a fitted rule: the regret of the rule beside every static choice, per scope.

Why a bar per chooser: the question a serving engine asks is "what does each way of choosing
cost against the oracle?", and the answer is one number per chooser; a panel per scope (all
cells, each replayed trace) shows whether the rule's edge holds on the traces. Title, legend and
save follow results/figures.py, so the PNG read alone says which GPU and libraries it holds for.
"""

from __future__ import annotations

import math
from pathlib import Path

from attnbench.results.figures import finish, panels, settings_text, title
from attnbench.results.rule_cells import Cells
from attnbench.results.rule_report import Line

RULE_COLOUR, DEFAULT_COLOUR, OTHER_COLOUR = "tab:green", "tab:orange", "tab:gray"


def plot_rule(cells: Cells, tables: dict[str, list[Line]], path: Path) -> Path:
    """rule_regret.png: a horizontal bar of regret % per chooser, one panel per scope."""
    fig, axes = panels(len(tables), width=6.4, height=0.32 * max(len(t) for t in tables.values()) + 1.2)
    for ax, (scope, lines) in zip(axes, tables.items()):
        shown = [l for l in lines[1:] if not math.isnan(l.regret_pct)]
        names = [l.name if l.name != "always" else f"always {l.choice}" for l in shown]
        colours = [RULE_COLOUR if l.name.startswith("rule") else DEFAULT_COLOUR if "default" in l.name
                   or l.name.startswith("best") else OTHER_COLOUR for l in shown]
        bars = ax.barh(range(len(shown)), [l.regret_pct for l in shown], color=colours)
        ax.bar_label(bars, [f"{l.regret_pct:.1f} %" for l in shown], fontsize=7, padding=2)
        ax.set_yticks(range(len(shown)), names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("regret over the per-cell oracle, %")
        ax.set_title(scope, fontsize=9, parse_math=False)  # a trace's name is the run's text, not mathtext
    about = cells.about.map(lambda v: v.replace("$", r"\$") if isinstance(v, str) else v)  # a GPU name likewise
    heading = title("Dispatch rule vs static choices", about, settings_text(about, [("dtype", ""), ("mode", "")]),
                    "green: the rule; orange: best single choice and the engines' defaults")
    return finish(fig, axes, heading, path)
