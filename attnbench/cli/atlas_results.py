"""`attnbench plot`, `export` and `compare` given an `attnbench atlas` run directory.

Why apart from cli/results.py: an atlas is read through its cells, crossovers and recorded axes
(results/atlas_read.py), not as a kernel sweep's rows, so each tool takes one branch here when an
input is an atlas, and cli/results.py keeps one line per command for it. plot redraws the atlas's
own pictures (results/atlas_plots.py) in its directory (under its lock, each replaced atomically)
or in --out; export writes its cells table (csv) or its summary (md); compare and merge of
atlases are refused with what to use instead. An atlas is read alone: with any other run, one
error line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.markup import escape

from attnbench.errors import UsageError

ATLAS_FORMATS = ("csv", "md")


def any_atlas(paths: list[Path]) -> Path | None:
    """The first of `paths` that is an atlas run directory (or its results.csv), None if none is."""
    from attnbench.results.atlas_read import atlas_dir

    return next((p for p in paths if atlas_dir(p) is not None), None)


def plot_atlas_run(console: Console, results: list[Path], out: Path | None, plot_target: Callable) -> None:
    """Redraw one atlas's maps and margin curves from its cells.csv, crossovers.csv and env.json,
    where plot_target (cli/results.py's: its own directory under its lock, or --out) says."""
    from attnbench.results.atlas_plots import pictures
    from attnbench.results.atlas_read import load_atlas

    alone(results, "plot", "draws an atlas alone (its maps are not overlaid)")
    atlas = load_atlas(results[0], "RESULTS")
    target, claim = plot_target(out, results, [atlas])
    try:
        with claim:
            written = [draw() for _, draw in pictures(atlas.cells, atlas.crossovers, atlas.ranges, atlas.rows, target)]
    except OSError as exc:  # the lock, the record or a picture in a directory that cannot be written
        raise UsageError(f"cannot write plots into {target}: {exc.strerror or exc}") from None
    for path in written:
        console.print(escape(str(path)), highlight=False)


def export_atlas(results: Path, fmt: str, out: Path | None) -> tuple[str, list]:
    """(text, the atlas read): the cells table for csv, the summary (as summary.md) for md; an
    --out that is a file of the atlas (cells.csv, a picture) is refused before anything is written."""
    from attnbench.results.atlas_read import load_atlas
    from attnbench.results.atlas_report import summary_text
    from attnbench.results.figures import is_cpu

    if fmt not in ATLAS_FORMATS:
        raise UsageError(f"--format: {results} is an atlas run, whose cells are no benchmark series for {fmt}; "
                         "give --format csv (its cells table) or md (its summary)")
    atlas = load_atlas(results, "RESULTS")
    if out is not None and os.path.realpath(out) in {os.path.realpath(p) for p in atlas.path.iterdir()}:
        raise UsageError(f"--out: {out} is part of the atlas being read; writing it would overwrite it")
    if fmt == "csv":
        return atlas.cells.to_csv(index=False), [atlas]
    cpu = is_cpu(atlas.rows)
    return summary_text(atlas.cells, atlas.crossovers, atlas.ranges, atlas.rows, atlas.stop, cpu), [atlas]


def refuse_compare(atlas: Path) -> None:
    raise UsageError(f"compare: {atlas} is an atlas run; compare pairs rows of sweeps and e2e runs, not atlas "
                     "cells: draw each atlas with `attnbench plot`, or diff their `attnbench export DIR --format "
                     "csv` cells tables")


def refuse_merge(atlas: Path) -> None:
    raise UsageError(f"merge: {atlas} is an atlas run; an atlas is never split into shards (each round needs "
                     "every cell of the one before): extend it with `attnbench atlas` and its flags with --resume "
                     f"{atlas} (a larger --max-cells refines further)")


def alone(paths: list[Path], tool: str, why: str) -> None:
    if len(paths) > 1:
        first = any_atlas(paths)
        raise UsageError(f"{tool}: {first} is an atlas run; {tool} {why}, so give it on its own")
