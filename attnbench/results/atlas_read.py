"""An `attnbench atlas` run directory read back, checked, for the tools over saved results.

Why apart from read.py: an atlas's results.csv is a kernel sweep's rows, but what a user reads of
an atlas is its cells (cells.csv), its crossovers (crossovers.csv) and the axes its env.json
records; `plot` redraws its maps from those, `export` writes its cells, and a sweep's plots or
key would be wrong for it (cells that are the same step share a point, and hundreds of cells
are no lines). A directory is an atlas when its results.csv has the cell columns atlas writes,
or it holds a cells.csv; every file it needs that is missing, unreadable or damaged ends in one
AttnbenchError naming the file, never a traceback.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from attnbench.errors import AttnbenchError
from attnbench.kernels.atlas_axes import AXES, NAMES, parse_range
from attnbench.results import files
from attnbench.results.atlas_cells import CELL_COLUMNS, VERDICT_COLUMNS

CROSSOVER_COLUMNS = ("axis", "low", "high", "status", *NAMES)
REDRAW = "run `attnbench atlas` with its flags and --resume {dir} to write its tables again"


@dataclass(frozen=True)
class Atlas:
    """One atlas run: its directory, the results.csv it came from (`source`, as a Run names it),
    the cells, the crossovers, each axis's Range, the rows (for the pictures' titles) and why its
    rounds stopped (env.json's record; blank where it has none)."""

    path: Path
    source: Path
    cells: pd.DataFrame
    crossovers: pd.DataFrame
    ranges: list
    rows: pd.DataFrame
    stop: str


def atlas_dir(path: str | Path) -> Path | None:
    """The atlas directory `path` names (the directory, or its results.csv), None if not an atlas."""
    path = Path(path)
    folder = path if os.path.isdir(path) else path.parent if path.name == "results.csv" else None
    if folder is None:
        return None
    if os.path.isfile(folder / "cells.csv"):
        return folder
    try:
        with open(folder / "results.csv", encoding="utf-8", errors="replace") as f:
            header = f.readline()
    except OSError:
        return None
    return folder if CELL_COLUMNS[0] in header.strip().split(",") else None


def load_atlas(path: str | Path, name: str) -> Atlas:
    """An atlas directory -> Atlas; AttnbenchError starting with `name` (RESULTS, BASE, NEW)."""
    folder = atlas_dir(path)
    if folder is None:
        raise AttnbenchError(f"{name}: {path} is not an atlas run (no cells.csv, no cell columns in results.csv)")
    try:
        cells = _table(folder, "cells.csv", (*NAMES, *VERDICT_COLUMNS))
        if not any(c.endswith(" ms") for c in cells.columns):
            raise AttnbenchError(f"{folder / 'cells.csv'} has no '<choice> ms' column; {REDRAW.format(dir=folder)}")
        _numbers(cells, folder / "cells.csv", [*(c for c in cells.columns if c.endswith(" ms")), "margin"])
        _numbers(cells, folder / "cells.csv", list(NAMES), required=True)
        crossovers = _table(folder, "crossovers.csv", CROSSOVER_COLUMNS, empty=True)
        _numbers(crossovers, folder / "crossovers.csv", ["low", "high", *NAMES])
        cells["tie"] = cells["tie"].map(_flag)
        rows = files.load_results(folder / "results.csv")
        env = _env(folder)
        record = env["atlas"].get("results")
        stop = str(record.get("stop", "")) if isinstance(record, dict) else ""
        return Atlas(folder, folder / "results.csv", cells, crossovers, atlas_ranges(env, folder), rows, stop)
    except AttnbenchError as exc:
        raise AttnbenchError(f"{name}: {exc}") from None


def _env(folder: Path) -> dict:
    """env.json, with an `atlas` record."""
    where = folder / "env.json"
    try:
        env = json.loads(where.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AttnbenchError(f"cannot read {where}: {exc.strerror or exc}") from None
    except ValueError as exc:  # json's and UTF-8's errors are ValueErrors
        raise AttnbenchError(f"{where} is not JSON ({exc})") from None
    if not isinstance(env, dict) or not isinstance(env.get("atlas"), dict):
        raise AttnbenchError(f"{where} has no atlas record; it is not the env.json an atlas writes")
    return env


def atlas_ranges(env: dict, folder: Path) -> list:
    """Each axis's Range, as the atlas's env.json records it (`atlas.axes.<name>.range`)."""
    where = folder / "env.json"
    try:
        axes = env["atlas"]["axes"]
        ranges = [parse_range(axis, axes[axis.name]["range"]) for axis in AXES]
    except (KeyError, TypeError) as exc:
        raise AttnbenchError(f"{where} records no atlas axes (atlas.axes.<axis>.range: {exc} is missing)") from None
    except AttnbenchError as exc:  # parse_range's message names the flag the range came from
        raise AttnbenchError(f"{where} records a range attnbench cannot read: {exc}") from None
    if not any(r.varies for r in ranges):
        raise AttnbenchError(f"{where} records no varying axis; an atlas maps at least one")
    return ranges


def _table(folder: Path, name: str, needed: tuple, empty: bool = False) -> pd.DataFrame:
    where = folder / name
    if not os.path.isfile(where):
        raise AttnbenchError(f"{folder} is an atlas run without its {name}; {REDRAW.format(dir=folder)}")
    try:
        table = pd.read_csv(io.StringIO(where.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc).strip().splitlines()[0]
        raise AttnbenchError(f"{where} is not a readable CSV file ({reason}); {REDRAW.format(dir=folder)}") from None
    missing = [c for c in needed if c not in table.columns]
    if missing:
        raise AttnbenchError(f"{where} lacks column(s) {', '.join(missing)}; {REDRAW.format(dir=folder)}")
    if table.empty and not empty:
        raise AttnbenchError(f"{where} holds no cells (a header only)")
    return table


def _numbers(table: pd.DataFrame, where: Path, columns: list[str], required: bool = False) -> None:
    """Each column a finite number, or empty where not `required` (a crossover's own axis, a failed choice)."""
    for column in columns:
        values = pd.to_numeric(table[column], errors="coerce")
        bad = ((table[column].notna() | required) & values.isna()) | values.isin([float("inf"), float("-inf")])
        if bad.any():
            row = int(bad.to_numpy().nonzero()[0][0]) + 1
            raise AttnbenchError(f"{where} row {row}: {column} {table[column][bad].iloc[0]!r} is not a finite number")
        table[column] = values


def _flag(value) -> bool | None:
    """A tie as cells.csv spells it: True, False or blank (no verdict)."""
    text = str(value).strip().lower()
    return True if text == "true" else False if text == "false" else None
