"""The dashboard's tables: the latest run of each kind per GPU, every change point, the atlas's
winner map, and every run filed.

Plain HTML rows, each carrying the filter attributes (data-gpu, data-backend, ...) so the page's
filters hide the rows they hide the lines of. Every value from the history is escaped, numbers are
rounded for people, and each table sits in its own box that scrolls sideways when it is wider than
the page (a winner map has a column per choice), so the page itself never does.
"""

from __future__ import annotations

import html

import pandas as pd

from attnbench.results.dashboard_data import FILTERS, Series
from attnbench.results.dashboard_families import number
from attnbench.results.history import Entry

WINNER_ROWS = 400  # a winner map longer than this is cut, and the page says so
WINNER_HIDDEN = ("round", "measured_as", "interval_low", "interval_high")  # the rest says what these do


def attributes(series: Series) -> str:
    return "data-filtered " + " ".join(f'data-{n}="{html.escape(getattr(series, n))}"' for n in FILTERS)


def cells(values: list, numeric: tuple[int, ...] = ()) -> str:
    return "".join(f'<td class="num">{v}</td>' if i in numeric else f"<td>{v}</td>" for i, v in enumerate(values))


def table(head: list[str], rows: list[str], box: str = "table-box") -> str:
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return f'<div class="{box}"><table><thead><tr>{header}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


def change_class(change: float) -> str:
    return "slower" if change > 0 else "faster"


def libraries(entry: Entry) -> str:
    return ", ".join(f"{k} {v}" for k, v in entry.libraries.items())


def latest_tables(series: list[Series], entries: list[Entry]) -> str:
    """Per GPU and kind of run: its latest entry, and every series it measured: value, change from
    the run before, and the series' last change point."""
    parts = []
    newest = {(e.gpu, e.kind): e for e in entries}  # entries run oldest first: the last of each stays
    for gpu, kind in sorted(newest):
        latest = newest[gpu, kind]
        parts.append(f"<details><summary><b>{html.escape(gpu)}</b>, {html.escape(kind)} run: commit <code>"
                     f"{html.escape(latest.commit[:12])}</code>, {html.escape(latest.date)}, "
                     f"{html.escape(libraries(latest))}</summary>")
        rows = []
        for s in sorted((s for s in series if s.gpu == gpu and s.run_kind == kind and s.commits[-1] == latest.commit
                         and s.dates[-1] == latest.date), key=lambda s: (s.chart, s.label)):
            before = f"{s.value[-1] / s.value[-2] - 1:+.1%}" if len(s.value) > 1 else ""
            last = s.changes[-1] if s.changes else None
            moved = (f'<span class="{change_class(last.change)}">{last.change:+.1%}</span> at '
                     f"<code>{html.escape(s.runs[last.index])}</code>" if last else "")
            rows.append(f"<tr {attributes(s)}>" + cells([html.escape(s.chart), html.escape(s.label),
                                                          f"{number(s.value[-1])} {s.unit}", before, moved], (2, 3))
                        + "</tr>")
        parts.append(table(["chart", "line", "latest", "vs the run before", "last change point"], rows) + "</details>")
    return "".join(parts)


def changes_table(series: list[Series]) -> str:
    """Every change point of the history, newest first."""
    found = sorted(((s.dates[c.index], s, c) for s in series for c in s.changes), key=lambda t: t[0], reverse=True)
    if not found:
        return "<p>No change points: no series moved by more than its noise and the minimum change.</p>"
    rows = [f"<tr {attributes(s)}>" + cells([f"<code>{html.escape(s.runs[c.index])}</code>", html.escape(s.chart),
                                             html.escape(s.label), f"{number(c.before)} -> {number(c.after)} {s.unit}",
                                             f'<span class="{change_class(c.change)}">{c.change:+.1%}</span>'],
                                            (3, 4)) + "</tr>"
            for _, s, c in found]
    return table(["run", "chart", "line", "median before -> after", "change"], rows, "table-box changes")


def winner_cell(column: str, value: object) -> str:
    shown = html.escape(number(value) if column != "winner" else str(value))
    return f"<b>{shown}</b>" if column == "winner" else shown


def winner_tables(winners: list[tuple[Entry, pd.DataFrame]]) -> str:
    """The atlas's cells (a cells.csv with a `winner` column) of the latest entry per GPU that has one:
    the columns that vary and the verdict, numbers rounded."""
    if not winners:
        return ""
    parts = ["<h2>Winner map</h2>"]
    for entry, frame in winners:
        shown = frame.head(WINNER_ROWS)
        columns = [c for c in frame.columns if c not in WINNER_HIDDEN and not str(c).endswith(" passed")
                   and (c == "winner" or frame[c].nunique(dropna=False) > 1)]
        cut = f" (the first {WINNER_ROWS} of {len(frame)} cells)" if len(frame) > WINNER_ROWS else ""
        rows = ["<tr>" + cells([winner_cell(c, row[c]) for c in columns]) + "</tr>" for _, row in shown.iterrows()]
        parts.append(f"<details open><summary>{html.escape(entry.gpu)}: commit {html.escape(entry.commit[:12])}, "
                     f"{html.escape(entry.date)}{cut}</summary>{table([str(c) for c in columns], rows)}</details>")
    return "".join(parts)


def runs_table(entries: list[Entry], labels: dict[str, str]) -> str:
    """Every run filed, newest first, as its kind."""
    rows = ["<tr>" + cells([f"<code>{html.escape(labels[e.id])}</code>", html.escape(e.kind), html.escape(e.gpu),
                            str(e.rows), html.escape(e.command)], (3,)) + "</tr>" for e in reversed(entries)]
    return table(["run", "kind", "gpu", "rows", "command"], rows)
