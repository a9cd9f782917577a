"""`attnbench dashboard HISTORY --out SITE`: a history as a static site, index.html alone.

The job reads every entry through the checked readers first (a broken entry is one error line and
nothing is written), then claims SITE as any run claims its directory (runs/rundir.py: new or
empty, --force removes only what attnbench wrote there) and writes index.html atomically.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from attnbench.errors import UsageError
from attnbench.results.dashboard_data import Settings, history_series
from attnbench.results.dashboard_page import page
from attnbench.results.files import read_table
from attnbench.results.history import RUNS, Entry
from attnbench.runs.history import entries as history_entries
from attnbench.runs.rundir import RunDir


def winner_maps(history: Path, entries: list[Entry]) -> list[tuple[Entry, pd.DataFrame]]:
    """The latest entry per GPU whose run filed the atlas's cells.csv with a `winner` column."""
    latest: dict[str, tuple[Entry, pd.DataFrame]] = {}
    for entry in reversed(entries):  # newest first: a GPU's first atlas found is its latest
        if entry.gpu in latest or "cells.csv" not in entry.files:
            continue
        header, rows = read_table(history / RUNS / entry.id / "cells.csv", {})
        if "winner" in header:
            latest[entry.gpu] = (entry, pd.DataFrame(rows, columns=header))
    return [latest[gpu] for gpu in sorted(latest)]


def build(history: Path, out: Path, force: bool, settings: Settings) -> Path:
    """Write SITE/index.html from HISTORY; the path written."""
    if out.resolve() == history.resolve() or history.resolve() in out.resolve().parents:
        raise UsageError(f"--out: {out} is inside the history {history}; give a directory outside it")
    entries = history_entries(history, "HISTORY")
    if not entries:
        raise UsageError(f"HISTORY: {history} holds no runs yet; file one with `attnbench history add RUN --history "
                         f"{history}`")
    html = page(history_series(history, entries, settings), entries, settings, winner_maps(history, entries))
    site = RunDir.prepare(out, force=force)
    with site.locked():
        return site.write_text("index.html", html)
