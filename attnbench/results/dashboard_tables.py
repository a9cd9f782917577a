"""The dashboard's tables: the latest run per GPU, every change point, the atlas's winner map.

Plain HTML rows, each carrying the filter attributes (data-gpu, data-backend, ...) so the page's
filters hide the rows they hide the lines of. Every value from the history is escaped.
"""

from __future__ import annotations

import html

import pandas as pd

from attnbench.results.dashboard_data import Series
from attnbench.results.history import Entry

FILTERED = ("gpu", "backend", "strategy", "kind", "shape")
WINNER_ROWS = 400  # a winner map longer than this is cut, and the page says so


def attributes(series: Series) -> str:
    return "data-filtered " + " ".join(f'data-{n}="{html.escape(getattr(series, n))}"' for n in FILTERED)


def cells(values: list, numeric: tuple[int, ...] = ()) -> str:
    return "".join(f'<td class="num">{v}</td>' if i in numeric else f"<td>{v}</td>" for i, v in enumerate(values))


def table(head: list[str], rows: list[str]) -> str:
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return f"<table><thead><tr>{header}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def change_class(change: float) -> str:
    return "slower" if change > 0 else "faster"


def latest_tables(series: list[Series], entries: list[Entry]) -> str:
    """Per GPU: its latest entry, and every series it measured: value, change from the run before,
    and the series' last change point."""
    parts = []
    newest = {e.gpu: e for e in entries}  # entries run oldest first: the last of a GPU stays
    for gpu in sorted(newest):
        latest = newest[gpu]
        libraries = ", ".join(f"{k} {v}" for k, v in latest.libraries.items())
        parts.append(f"<details><summary><b>{html.escape(gpu)}</b>: commit <code>{html.escape(latest.commit[:12])}"
                     f"</code>, {html.escape(latest.date)}, {html.escape(libraries)}</summary>")
        rows = []
        for s in sorted((s for s in series if s.gpu == gpu and s.commits[-1] == latest.commit and
                         s.dates[-1] == latest.date), key=lambda s: (s.chart, s.label)):
            before = f"{s.value[-1] / s.value[-2] - 1:+.1%}" if len(s.value) > 1 else ""
            last = s.changes[-1] if s.changes else None
            moved = (f'<span class="{change_class(last.change)}">{last.change:+.1%}</span> at '
                     f"<code>{html.escape(s.commits[last.index][:8])}</code>" if last else "")
            rows.append(f"<tr {attributes(s)}>" + cells([html.escape(s.chart), html.escape(s.label),
                                                          f"{s.value[-1]:.4g} {s.unit}", before, moved], (2, 3))
                        + "</tr>")
        parts.append(table(["chart", "line", "latest", "vs the run before", "last change point"], rows) + "</details>")
    return "".join(parts)


def changes_table(series: list[Series]) -> str:
    """Every change point of the history, newest first."""
    found = sorted(((s.dates[c.index], s, c) for s in series for c in s.changes), key=lambda t: t[0], reverse=True)
    if not found:
        return "<p>No change points: no series moved by more than its noise and the minimum change.</p>"
    rows = [f"<tr {attributes(s)}>" + cells([f"<code>{html.escape(s.commits[c.index][:12])}</code>",
                                             html.escape(date[:10]), html.escape(s.chart), html.escape(s.label),
                                             f"{c.before:.4g} -> {c.after:.4g} {s.unit}",
                                             f'<span class="{change_class(c.change)}">{c.change:+.1%}</span>'],
                                            (4, 5)) + "</tr>"
            for date, s, c in found]
    return table(["commit", "date", "chart", "line", "median before -> after", "change"], rows)


def winner_tables(winners: list[tuple[Entry, pd.DataFrame]]) -> str:
    """The atlas's cells (a cells.csv with a `winner` column) of the latest entry per GPU that has one."""
    if not winners:
        return ""
    parts = ["<h2>Winner map</h2>"]
    for entry, frame in winners:
        shown = frame.head(WINNER_ROWS)
        cut = f" (the first {WINNER_ROWS} of {len(frame)} cells)" if len(frame) > WINNER_ROWS else ""
        rows = ["<tr>" + cells([f"<b>{html.escape(str(v))}</b>" if c == "winner" else html.escape(str(v))
                                for c, v in row.items()]) + "</tr>" for _, row in shown.iterrows()]
        parts.append(f"<details open><summary>{html.escape(entry.gpu)}: commit {html.escape(entry.commit[:12])}, "
                     f"{html.escape(entry.date)}{cut}</summary>{table([str(c) for c in frame.columns], rows)}"
                     "</details>")
    return "".join(parts)
