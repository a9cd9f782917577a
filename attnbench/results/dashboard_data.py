"""A history as series: every line of every chart, followed over the filed runs, with its change points.

A series is one line of one chart (dashboard_families.py says what a chart and a line are for each
kind of run); its points are the runs that measured it, oldest first. The x axis is the runs, not
the commits: two runs of one commit (a re-run, eager and graph runs filed apart) are two places on
it, each labelled by its commit and time. This is the site's data; dashboard_page.py draws it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from attnbench.results.changepoints import MIN_CHANGE, PENALTY, ChangePoint, change_points
from attnbench.results.dashboard_families import Point, points
from attnbench.results.history import Entry, load_entry, load_entry_env


FILTERS = ("gpu", "run_kind", "backend", "strategy", "mode", "kind", "shape")  # what the page's filters choose by


@dataclass
class Series:
    chart: str          # the chart's title
    label: str          # the line
    gpu: str
    run_kind: str       # kernel, e2e, replay or atlas
    kind: str           # the batch kind (decode, mixed, ...), "e2e", "trace" or "cells"
    shape: str          # heads/kv heads x head dim, or the e2e model
    backend: str
    strategy: str
    mode: str
    unit: str
    measure: str = ""   # the y axis: what the value is, and what low..high is
    runs: list[str] = field(default_factory=list)   # each point's run, as the x axis names it
    commits: list[str] = field(default_factory=list)
    dates: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
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


def run_labels(entries: list[Entry]) -> dict[str, str]:
    """Each entry's place on the x axis: its commit and UTC time, and a number where two still agree."""
    labels: dict[str, str] = {}
    seen: dict[str, int] = {}
    for entry in entries:
        label = f"{entry.commit[:8]} {entry.when().astimezone(dt.timezone.utc):%m-%d %H:%M}"
        seen[label] = seen.get(label, 0) + 1
        labels[entry.id] = label if seen[label] == 1 else f"{label} #{seen[label]}"
    return labels


def add_point(found: dict[tuple, Series], point: Point, entry: Entry, run_kind: str, label: str) -> None:
    key = (point.chart, point.line)
    series = found.get(key)
    if series is None:
        series = found[key] = Series(point.title, point.label, entry.gpu, run_kind, point.kind, point.shape,
                                     point.backend, point.strategy, point.mode, point.unit, point.measure)
    if series.runs and series.runs[-1] == label:  # a line measured twice in one run: its last row stays
        for name in ("runs", "commits", "dates", "notes", "value", "low", "high"):
            getattr(series, name).pop()
    series.runs.append(label)
    series.commits.append(entry.commit)
    series.dates.append(entry.date)
    series.notes.append(point.note)
    series.value.append(point.value)
    series.low.append(point.low)
    series.high.append(point.high)


def history_series(history: Path, entries: list[Entry], settings: Settings) -> list[Series]:
    """Every series of the history (entries oldest first), each with its change points."""
    found: dict[tuple, Series] = {}
    labels = run_labels(entries)
    charts_per_title: dict[str, set] = {}
    for entry in entries:
        for point in points(entry, load_entry(history, entry), load_entry_env(history, entry)):
            add_point(found, point, entry, entry.kind, labels[entry.id])
            charts_per_title.setdefault(point.title, set()).add(point.chart)
    for series in found.values():
        series.changes = change_points(series.value, settings.penalty, settings.min_change)
    numbered = {title: sorted(charts) for title, charts in charts_per_title.items() if len(charts) > 1}
    for (chart, _), series in found.items():  # two charts whose titles agree (another seed, block size): numbered
        if series.chart in numbered:
            series.chart = f"{series.chart} · #{numbered[series.chart].index(chart) + 1}"
    return list(found.values())
