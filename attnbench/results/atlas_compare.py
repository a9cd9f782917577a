"""Two atlases compared cell by cell: where the winner changed, and each choice's time new / base.

Why its own: a sweep's compare pairs rows on the point key, but an atlas's question is about its
cells (the same coordinates on two GPUs, two library versions, before and after a change): did
the winner move, and how much did each backend x strategy speed up or slow down there. Cells
pair on their seven coordinates; each choice's rows pair within a cell and are judged as compare
judges a row pair (results/compare.py `judge`: Welch's t over replicate medians, else a bootstrap
over the samples, else p10-p90), so "slower" means what it means in `attnbench compare`. A cell
that is the same step as another counts once per cell, as cells.csv lists it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from attnbench.kernels.atlas_axes import NAMES
from attnbench.results.atlas_cells import CELL_COLUMNS, choice_of
from attnbench.results.atlas_read import Atlas
from attnbench.results.compare import judge
from attnbench.results.tables import markdown_table

VERDICTS = ("slower", "faster", "same", "noisy")
SHOWN = 20  # winner changes listed at most


@dataclass(frozen=True)
class AtlasComparison:
    paired: int
    only_base: int
    only_new: int
    moved: pd.DataFrame    # a line per paired cell whose winner changed: varying coordinates, base, new
    choices: pd.DataFrame  # a line per choice: cells, geometric mean of new / base, verdict counts
    judged: bool           # False on CPU rows: no verdicts

    @property
    def regressed(self) -> bool:
        return self.judged and bool((self.choices["slower"] > 0).any())


def _coord(values) -> tuple:
    return tuple(float(v) for v in values)


def _rows(atlas: Atlas) -> dict[tuple, pd.Series]:
    """Each passing timed row by (cell coordinates, choice)."""
    rows = atlas.rows.assign(choice=choice_of(atlas.rows))
    passing = rows[(rows["verdict"] == "pass") & rows["strategy"].notna() & (rows["strategy"].astype(str) != "")]
    return {(_coord(r[list(CELL_COLUMNS)]), r["choice"]): r for _, r in passing.iterrows()}


def _winners(atlas: Atlas) -> dict[tuple, str]:
    return {_coord(line[list(NAMES)]): (w if isinstance(w := line["winner"], str) else "")
            for _, line in atlas.cells.iterrows()}


def compare_atlases(base: Atlas, new: Atlas, threshold: float, judged: bool) -> AtlasComparison:
    base_cells, new_cells = _winners(base), _winners(new)
    paired = sorted(set(base_cells) & set(new_cells))
    varying = [n for n, r in zip(NAMES, base.ranges) if r.varies]
    moved = pd.DataFrame([{**{n: v for n, v in zip(NAMES, c) if n in varying}, "base winner": base_cells[c] or "-",
                           "new winner": new_cells[c] or "-"} for c in paired if base_cells[c] != new_cells[c]])
    base_rows, new_rows = _rows(base), _rows(new)
    found: dict[str, list[dict]] = {}
    for key in sorted(set(base_rows) & set(new_rows)):
        if key[0] in base_cells and key[0] in new_cells:
            found.setdefault(key[1], []).append(judge(base_rows[key], new_rows[key], threshold))
    lines = []
    for choice, judgements in sorted(found.items()):
        ratios = [j["ratio"] for j in judgements]
        counts = {v: sum(j["verdict"] == v for j in judgements) if judged else 0 for v in VERDICTS}
        lines.append({"choice": choice, "cells": len(judgements),
                      "new / base": math.exp(sum(map(math.log, ratios)) / len(ratios)),
                      "lowest": min(ratios), "highest": max(ratios), **counts})
    choices = pd.DataFrame(lines, columns=["choice", "cells", "new / base", "lowest", "highest", *VERDICTS])
    return AtlasComparison(len(paired), len(set(base_cells) - set(new_cells)), len(set(new_cells) - set(base_cells)),
                           moved, choices, judged)


def summary_line(result: AtlasComparison) -> str:
    slower = int(result.choices["slower"].sum()) if result.judged else 0
    verdict = f"{slower} cell x choice slower beyond threshold and noise" if result.judged else \
        "no verdicts (CPU timings: identical runs differ by more than a gate can tell)"
    return (f"{result.paired} cells paired ({result.only_base} only in BASE, {result.only_new} only in NEW); "
            f"winner changed in {len(result.moved)}; {verdict}")


def markdown(result: AtlasComparison) -> str:
    out = ["## attnbench atlas compare", "", summary_line(result), "", "### Each choice, new / base", "",
           markdown_table(result.choices), "### Cells whose winner changed", ""]
    shown = result.moved.head(SHOWN)
    out += [markdown_table(shown) if not shown.empty else "_none_\n"]
    if len(result.moved) > SHOWN:
        out += [f"... and {len(result.moved) - SHOWN} more", ""]
    return "\n".join(out)
