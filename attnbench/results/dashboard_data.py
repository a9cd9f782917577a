"""A history as series: every row of every filed run, followed over commits, with its change points.

A series is one configuration (the kind's key columns: compare matches rows on the same ones) on
one GPU, in one kind of run; its points are the entries that measured it, oldest first. A chart
gathers the series that differ only in backend and strategy, so the lines of one chart share a
scale and a filter on backend or strategy removes lines, not charts. This is the site's data;
dashboard_page.py draws it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from attnbench.kernels.workload import KIND_SETTINGS
from attnbench.results.changepoints import MIN_CHANGE, PENALTY, ChangePoint, change_points
from attnbench.results.compare import row_label
from attnbench.results.history import Entry, load_entry
from attnbench.results.read import E2E, MEASURED, Run, canonical
from attnbench.results.replicates import MIN_REPLICATES, mean_interval, parse_times

LINE = ("backend", "strategy")  # what tells the lines of one chart apart
E2E_TITLE = ("model", "input_len", "output_len", "batch_size", "mode")


@dataclass
class Series:
    chart: str          # the chart's title (GPU, kind of run, point)
    label: str          # the line: backend and strategy
    gpu: str
    run_kind: str       # kernel, e2e or replay
    kind: str           # the batch kind (decode, mixed, ...) or "e2e"
    shape: str          # heads/kv heads x head dim, or the e2e model
    backend: str
    strategy: str
    unit: str
    full: str = ""      # every key column of the point, for charts whose short titles agree
    interval: str = ""  # what low..high is: p10-p90, 95 % CI over replicates, p50-p90
    commits: list[str] = field(default_factory=list)
    dates: list[str] = field(default_factory=list)
    value: list[float] = field(default_factory=list)
    low: list[float] = field(default_factory=list)
    high: list[float] = field(default_factory=list)
    changes: list[ChangePoint] = field(default_factory=list)

    def change_commits(self) -> list[str]:
        return [self.commits[c.index] for c in self.changes]


@dataclass
class Settings:
    penalty: float = PENALTY
    min_change: float = MIN_CHANGE


def shape_of(row, run: Run) -> str:
    if run.kind is E2E:
        return str(row.get("model", "?"))
    kv = row.get("num_kv_heads")
    kv = row["num_heads"] if pd.isna(kv) or str(kv) == "" else kv
    return f"{int(row['num_heads'])}/{int(kv)}x{int(row['head_dim'])}"


def chart_title(row, run: Run, entry: Entry) -> str:
    if run.kind is E2E:
        columns = [c for c in E2E_TITLE if c in row.index]
    else:
        columns = ["kind", "num_tokens", *KIND_SETTINGS.get(row["kind"], ()), "mode"]
    what = f"{entry.kind} {shape_of(row, run)} {row_label(row, columns)}"
    return f"{entry.gpu} | {what}"


def interval_of(row, run: Run) -> tuple[float, float, str]:
    """(low, high, what they are): the replicate medians' 95 % interval where the row has replicates,
    else its p10..p90 (kernel) or p50..p90 (e2e); the value itself where nothing is stored."""
    value = float(row[run.kind.measure])
    replicates = parse_times(row.get("replicate_medians_ms"))
    if len(replicates) >= MIN_REPLICATES:
        low, high = mean_interval(replicates)
        return low, high, "95 % interval over replicate medians"
    low_col, high_col = run.kind.spread
    low = float(row[low_col]) if low_col and pd.notna(row.get(low_col)) else value
    high = float(row[high_col]) if high_col and pd.notna(row.get(high_col)) else value
    return low, high, "p10-p90" if low_col else "p50-p90"


def add_rows(found: dict[tuple, Series], entry: Entry, run: Run) -> None:
    timed = run.rows[run.rows["verdict"].isin(MEASURED)]
    point = [c for c in run.kind.key if c not in LINE]
    for _, row in timed.iterrows():
        chart_key = (entry.gpu, entry.kind, *(canonical(row[c]) for c in point))
        key = (*chart_key, *(canonical(row[c]) for c in LINE))
        series = found.get(key)
        if series is None:
            kind = "e2e" if run.kind is E2E else str(row["kind"])
            series = found[key] = Series(chart_title(row, run, entry), f"{row['backend']} {row['strategy']}",
                                         entry.gpu, entry.kind, kind, shape_of(row, run), str(row["backend"]),
                                         str(row["strategy"]), run.kind.unit, full=row_label(row, point))
        low, high, series.interval = interval_of(row, run)
        series.commits.append(entry.commit)
        series.dates.append(entry.date)
        series.value.append(float(row[run.kind.measure]))
        series.low.append(low)
        series.high.append(high)


def history_series(history: Path, entries: list[Entry], settings: Settings) -> list[Series]:
    """Every series of the history (entries oldest first), each with its change points."""
    found: dict[tuple, Series] = {}
    for entry in entries:
        add_rows(found, entry, load_entry(history, entry))
    points_per_title: dict[str, set] = {}
    for series in found.values():
        series.changes = change_points(series.value, settings.penalty, settings.min_change)
        points_per_title.setdefault(series.chart, set()).add(series.full)
    for series in found.values():  # two points whose short titles agree: name every key column
        if len(points_per_title[series.chart]) > 1:
            series.chart = f"{series.chart} | {series.full}"
    return list(found.values())
