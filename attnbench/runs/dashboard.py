"""`attnbench dashboard HISTORY --out SITE`: a history as a static site, index.html alone.

The job reads every entry through the checked readers first (a broken entry is one error line and
nothing is written), then claims SITE as any run claims its directory (runs/rundir.py: new or
empty, --force removes only what attnbench wrote there) and writes index.html atomically.

The page carries the plotly.js that the installed plotly (Python) ships: the full bundle, whose
parse and start-up are most of the page's load time. --plotly-js puts one of Plotly's partial
bundles there instead (plotly.js-basic-dist-min on npm holds the scatter traces the page draws),
checked here to be the same plotly.js version the figures were built for.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pandas as pd

from attnbench.errors import UsageError
from attnbench.results.dashboard_data import Settings, history_series
from attnbench.results.dashboard_page import PlotlyBundle, page
from attnbench.results.files import read_table
from attnbench.results.history import RUNS, Entry, filed_as_atlas, load_entry_env
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


def refiled(history: Path, entry: Entry) -> Entry:
    """The entry with the kind its filed run says: an atlas filed by an older attnbench is listed as a
    "kernel" run, but its env.json holds the atlas's record."""
    atlas = entry.kind == "kernel" and filed_as_atlas(load_entry_env(history, entry))
    return replace(entry, kind="atlas") if atlas else entry


HEADER_CHARS = 200  # a dist file names its bundle and version in its first lines
BUNDLE_HEADER = re.compile(r"\A/\*\*\s*\*\s*plotly\.js (?:\((?P<name>[^)]*)\) )?v(?P<version>\d+\.\d+\.\d+)\s")


def plotly_bundle(path: Path | None) -> PlotlyBundle:
    """The plotly.js to inline: the installed plotly's full bundle, or the file at `path` when it is a
    plotly.js dist file of the same version (its header names both)."""
    import plotly.offline

    version = plotly.offline.get_plotlyjs_version()
    if path is None:
        return PlotlyBundle("full", version, plotly.offline.get_plotlyjs())
    try:
        with path.open(encoding="utf-8") as file:
            text = file.read(HEADER_CHARS)
            found = BUNDLE_HEADER.match(text)
            text += file.read() if found else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--plotly-js: cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if found is None:
        raise UsageError(f"--plotly-js: {path} does not open with a plotly.js dist header (/** * plotly.js ... vX.Y.Z); "
                         f"give a file such as plotly-basic.min.js from npm's plotly.js-basic-dist-min@{version}")
    if "</script" in text.lower():  # it is inlined in a <script> element, which this would end early
        raise UsageError(f"--plotly-js: {path} holds '</script', so it cannot be inlined; give a plotly.js dist file")
    if found["version"] != version:
        raise UsageError(f"--plotly-js: {path} is plotly.js v{found['version']}, but the installed plotly builds figures "
                         f"for v{version}; use plotly.js-basic-dist-min@{version}")
    return PlotlyBundle(found["name"] or "full", version, text)


def build(history: Path, out: Path, force: bool, settings: Settings, plotly_js: Path | None = None) -> Path:
    """Write SITE/index.html from HISTORY (with the plotly.js bundle at `plotly_js`, else the full one);
    the path written."""
    if out.resolve() == history.resolve() or history.resolve() in out.resolve().parents:
        raise UsageError(f"--out: {out} is inside the history {history}; give a directory outside it")
    bundle = plotly_bundle(plotly_js)
    entries = history_entries(history, "HISTORY")
    if not entries:
        raise UsageError(f"HISTORY: {history} holds no runs yet; file one with `attnbench history add RUN --history "
                         f"{history}`")
    entries = [refiled(history, entry) for entry in entries]
    html = page(history_series(history, entries, settings), entries, settings, winner_maps(history, entries), bundle)
    site = RunDir.prepare(out, force=force, inputs=[history, *([plotly_js] if plotly_js else [])])
    with site.locked():
        return site.write_text("index.html", html)
