"""`attnbench plot`, `export` and `compare` given an `attnbench atlas` run directory.

Why apart from cli/results.py: an atlas is read through its cells, crossovers and recorded axes
(results/atlas_read.py), not as a kernel sweep's rows, so each tool takes one branch here when an
input is an atlas, and cli/results.py keeps one line per command for it. plot redraws the atlas's
own pictures (results/atlas_plots.py) in its directory (under its lock, each replaced atomically)
or in --out; export writes its cells table (csv) or its summary (md); compare pairs two atlases'
cells (results/atlas_compare.py); merge refuses an atlas (it has no shards). An atlas is read
alone or with another atlas (compare): with any other run, one error line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from attnbench.errors import UsageError

ATLAS_FORMATS = ("csv", "md")


def load_atlas(path: Path, name: str):
    from attnbench.results.atlas_read import load_atlas as load

    return load(path, name)


def any_atlas(paths: list[Path]) -> Path | None:
    """The first of `paths` that is an atlas run directory (or its results.csv), None if none is."""
    from attnbench.results.atlas_read import atlas_dir

    return next((p for p in paths if atlas_dir(p) is not None), None)


def plot_atlas_run(console: Console, results: list[Path], out: Path | None, plot_target: Callable) -> None:
    """Redraw one atlas's maps and margin curves from its cells.csv, crossovers.csv and env.json,
    where plot_target (cli/results.py's: its own directory under its lock, or --out) says."""
    from attnbench.results.atlas_plots import pictures

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
    from attnbench.results.atlas_report import summary_text
    from attnbench.results.figures import is_cpu

    if fmt not in ATLAS_FORMATS:
        raise UsageError(f"--format: {results} is an atlas run, whose cells are no benchmark series for {fmt}; "
                         "give --format csv (its cells table) or md (its summary)")
    atlas = load_atlas(results, "RESULTS")
    refuse_atlas_file(out, "--out", [atlas])
    if fmt == "csv":
        return atlas.cells.to_csv(index=False), [atlas]
    cpu = is_cpu(atlas.rows)
    return summary_text(atlas.cells, atlas.crossovers, atlas.ranges, atlas.rows, atlas.stop, cpu), [atlas]


def compare_atlas_runs(console: Console, base: Path, new: Path, threshold: str, markdown: Path | None,
                       ignore: list | None) -> bool:
    """Two atlases cell by cell (results/atlas_compare.py); True when a choice is slower in a cell."""
    from attnbench.results import atlas_compare
    from attnbench.results.compare import parse_threshold
    from attnbench.results.export import write_output
    from attnbench.results.figures import is_cpu

    other = next((p for p in (base, new) if any_atlas([p]) is None), None)
    if other is not None:
        raise UsageError(f"compare: {any_atlas([base, new])} is an atlas run and {other} is not; compare two atlases")
    if ignore:
        raise UsageError("--ignore: atlas cells pair on their coordinates and choices; --ignore is for sweeps")
    smallest = parse_threshold(threshold)
    atlases = [load_atlas(base, "BASE"), load_atlas(new, "NEW")]
    judged = not any(is_cpu(a.rows) for a in atlases)
    result = atlas_compare.compare_atlases(*atlases, smallest, judged)
    if markdown:
        refuse_atlas_file(markdown, "--markdown", atlases)
        write_output(markdown, atlas_compare.markdown(result), "--markdown", atlases)
    _print_comparison(console, result)
    if markdown:
        console.print(f"markdown: {escape(str(markdown))}", highlight=False)
    return result.regressed


def _print_comparison(console: Console, result) -> None:
    from attnbench.results.atlas_compare import SHOWN, summary_line

    table = Table("choice", "cells", "new / base (geo mean)", "lowest", "highest", "slower", "faster", "same",
                  "noisy", title="each choice, cell by cell")
    for line in result.choices.itertuples(index=False):
        table.add_row(escape(line[0]), str(line[1]), *(f"{v:.3f}" for v in line[2:5]),
                      *(str(v) if result.judged else "-" for v in line[5:]))
    console.print(table)
    if not result.moved.empty:
        moved = Table(*map(str, result.moved.columns), title="cells whose winner changed")
        for line in result.moved.head(SHOWN).itertuples(index=False):
            moved.add_row(*(escape(f"{v:g}" if isinstance(v, float) else str(v)) for v in line))
        console.print(moved)
        if len(result.moved) > SHOWN:
            console.print(f"... and {len(result.moved) - SHOWN} more (--markdown lists as many)", highlight=False)
    style = "bold red" if result.regressed else "green"
    console.print(f"[{style}]{escape(summary_line(result))}[/]")


def refuse_atlas_file(out: Path | None, flag: str, atlases: list) -> None:
    """An output path that is a file of an atlas being read (cells.csv, a picture) is refused."""
    if out is not None and any(os.path.realpath(out) in {os.path.realpath(p) for p in atlas.path.iterdir()}
                               for atlas in atlases):
        raise UsageError(f"{flag}: {out} is part of the atlas being read; writing it would overwrite it")


def refuse_merge(atlas: Path) -> None:
    raise UsageError(f"merge: {atlas} is an atlas run; an atlas is never split into shards (each round needs "
                     "every cell of the one before): extend it with `attnbench atlas` and its flags with --resume "
                     f"{atlas} (a larger --max-cells refines further)")


def alone(paths: list[Path], tool: str, why: str) -> None:
    if len(paths) > 1:
        first = any_atlas(paths)
        raise UsageError(f"{tool}: {first} is an atlas run; {tool} {why}, so give it on its own")
