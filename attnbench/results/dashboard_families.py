"""What one filed run adds to the dashboard: its points, each named by the chart and the line it goes on.

Why a family per kind of run: a chart is read by a person, so it gathers what they compare over
commits. A kernel sweep's chart is one batch kind at one shape and setting, a line per token count
x backend x strategy x mode; an e2e run's is one model at one request size, a line per batch size x
backend x strategy x mode; a replay is one number per choice (its trace's total, the buckets
weighed by the steps they stand for), so a replay is one chart of its choices, not one per bucket;
an atlas is one chart of its choices too (the geometric mean over the cells every choice passed),
with its winner map in a table. Titles and labels are built from the values, never from the
column names, and numbers in them are rounded for people.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from attnbench.kernels.workload import KIND_SETTINGS
from attnbench.results.atlas_cells import CELL_COLUMNS
from attnbench.results.history import Entry
from attnbench.results.read import E2E, MEASURED, Run, canonical
from attnbench.results.replicates import MIN_REPLICATES, mean_interval, parse_times

SETTING_NAMES = {"context": "context", "spec_k": "spec k", "prefill_len": "seq len", "prefix_ratio": "prefix",
                 "decode_share": "decode share", "decode_seqs": "decode seqs"}
KERNEL_LINE = ("num_tokens", "backend", "strategy", "mode", "l2")     # a kernel chart's lines differ in these
E2E_LINE = ("batch_size", "backend", "strategy", "mode", "cudagraph")  # an e2e chart's lines
CHOICE = ("backend", "strategy", "mode")                                 # a replay's or an atlas's lines
TIMES = ("median_ms", "p10_ms", "p90_ms")                                # a kernel row's value, and its band


@dataclass(frozen=True)
class Point:
    """One value of one line in one run."""

    chart: tuple            # what the chart is (GPU, kind of run, what it measured): its key
    title: str
    line: tuple             # what the line is, within its chart
    label: str
    kind: str               # the batch kind (decode, mixed, ...), "e2e", "trace" or "cells"
    shape: str
    backend: str
    strategy: str
    mode: str
    unit: str
    measure: str            # what the y axis is
    value: float
    low: float
    high: float
    note: str = ""          # said in the hover beside the value


def number(value: object) -> str:
    """A value for people: whole numbers as they are, other numbers to 3 significant digits."""
    try:
        found = float(value)
    except (TypeError, ValueError):
        return str(value)
    if not math.isfinite(found):
        return str(value)
    return str(int(found)) if found == int(found) and abs(found) < 1e15 else f"{found:.3g}"


def dtype_name(value: object) -> str:
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(str(value), str(value))


def shape_of(row) -> str:
    kv = row.get("num_kv_heads")
    kv = row["num_heads"] if pd.isna(kv) or str(kv) == "" else kv
    return f"{number(row['num_heads'])}/{number(kv)}x{number(row['head_dim'])}"


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


def kernel_points(entry: Entry, run: Run, env: dict) -> list[Point]:
    timed = run.rows[run.rows["verdict"].isin(MEASURED)]
    chart_columns = [c for c in run.kind.key if c not in KERNEL_LINE]
    found = []
    for _, row in timed.iterrows():
        kind = str(row["kind"])
        settings = ", ".join(f"{SETTING_NAMES[c]} {number(row[c])}" for c in KIND_SETTINGS.get(kind, ())
                             if c in row.index and number(row[c]) not in ("", "0", "nan"))
        title = " · ".join(p for p in (entry.gpu, "kernel", f"{kind} {shape_of(row)} {dtype_name(row['dtype'])}",
                                       settings) if p)
        cold = " · cold L2" if str(row.get("l2")) == "cold" else ""
        label = f"{row['backend']} {row['strategy']} {row['mode']} · {number(row['num_tokens'])} tokens{cold}"
        low, high, interval = interval_of(row, run)
        found.append(Point((entry.gpu, "kernel", *(canonical(row[c]) for c in chart_columns)), title,
                           tuple(canonical(row[c]) for c in KERNEL_LINE), label,
                           kind, shape_of(row), str(row["backend"]), str(row["strategy"]), str(row["mode"]),
                           run.kind.unit, f"median {run.kind.unit} ({interval})", float(row[run.kind.measure]),
                           low, high))
    return found


def e2e_points(entry: Entry, run: Run, env: dict) -> list[Point]:
    timed = run.rows[run.rows["verdict"].isin(MEASURED)]
    chart_columns = [c for c in run.kind.key if c not in E2E_LINE]
    found = []
    for _, row in timed.iterrows():
        tp = f" · tp {number(row['tp'])}" if number(row.get("tp", 1)) not in ("1", "") else ""
        title = (f"{entry.gpu} · e2e · {row['model']} {dtype_name(row['dtype'])} · {number(row['input_len'])} in / "
                 f"{number(row['output_len'])} out tokens{tp}")
        graphs = str(row.get("cudagraph", ""))
        graphs = f" · {graphs} graphs" if graphs not in ("", "full", "none", "nan") else ""
        label = f"{row['backend']} {row['strategy']} {row['mode']} · batch {number(row['batch_size'])}{graphs}"
        low, high, interval = interval_of(row, run)
        found.append(Point((entry.gpu, "e2e", *(canonical(row[c]) for c in chart_columns)), title,
                           tuple(canonical(row[c]) for c in E2E_LINE), label,
                           "e2e", str(row["model"]), str(row["backend"]), str(row["strategy"]), str(row["mode"]),
                           run.kind.unit, f"request p50 {run.kind.unit} ({interval})", float(row[run.kind.measure]),
                           low, high))
    return found


def choice_point(entry: Entry, chart: tuple, title: str, rows: pd.DataFrame, kind: str, measure: str,
                 value: tuple[float, float, float], note: str) -> Point:
    first = rows.iloc[0]
    return Point(chart, title, tuple(canonical(first[c]) for c in CHOICE),
                 f"{first['backend']} {first['strategy']} {first['mode']}", kind, shape_of(first),
                 str(first["backend"]), str(first["strategy"]), str(first["mode"]), "ms", measure, *value, note=note)


def with_times(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows with every one of TIMES a positive number: a band the file lacks, or holds no positive
    number in (a crafted file), is the median itself (which load_entry checked)."""
    median = pd.to_numeric(rows["median_ms"], errors="coerce")
    band = {c: pd.to_numeric(rows[c], errors="coerce") if c in rows else median for c in TIMES}
    return rows.assign(**{c: values.where(values > 0).fillna(median) for c, values in band.items()})


def replay_points(entry: Entry, run: Run, env: dict) -> list[Point]:
    """Per choice, the trace's total: each passing bucket row's time times the steps it stands for.
    A choice whose rows stand for fewer steps than the fullest choice's (a bucket failed) is left out."""
    rows = run.rows[(run.rows["verdict"] == "pass") & (run.rows.get("part", "bucket") == "bucket")]
    rows = with_times(rows).assign(steps=pd.to_numeric(rows["steps"], errors="coerce")).dropna(subset=["steps"])
    if rows.empty:
        return []
    trace = Path(str((env.get("replay") or {}).get("trace") or "a trace")).name
    first = rows.iloc[0]
    title = f"{entry.gpu} · replay · {trace} · {shape_of(first)} {dtype_name(first['dtype'])}"
    chart = (entry.gpu, "replay", trace, shape_of(first), canonical(first["dtype"]))
    groups = list(rows.groupby(list(CHOICE), sort=True))
    weight = max(float(g["steps"].sum()) for _, g in groups)
    found = []
    for _, group in groups:
        if float(group["steps"].sum()) < weight * (1 - 1e-9):
            continue
        total = tuple(float((group[c] * group["steps"]).sum()) for c in TIMES)
        found.append(choice_point(entry, chart, title, group, "trace", "trace total ms (Σ p10-p90)",
                                  total, f"{number(weight)} steps in {group['bucket'].nunique()} buckets"))
    return found


def geomean(values: pd.Series) -> float:
    return float(math.exp(pd.to_numeric(values, errors="coerce").map(math.log).mean()))


def atlas_points(entry: Entry, run: Run, env: dict) -> list[Point]:
    """Per choice, the geometric mean of its medians over the cells every choice passed."""
    cells = [c for c in CELL_COLUMNS if c in run.rows.columns]
    rows = run.rows[run.rows["verdict"] == "pass"]
    if rows.empty or not cells:
        return []
    rows = with_times(rows).assign(cell=rows[cells].astype(str).agg("|".join, axis=1))
    groups = list(rows.groupby(list(CHOICE), sort=True))
    common = set.intersection(*(set(g["cell"]) for _, g in groups))
    axes = (env.get("atlas") or {}).get("axes") or {}
    ranges = ", ".join(f"{name.replace('_', ' ')} {axis.get('range')}" for name, axis in sorted(axes.items())
                       if isinstance(axis, dict) and len(set(str(axis.get("range")).split(":")[:2])) > 1)
    heads = (env.get("atlas") or {}).get("heads")
    title = " · ".join(p for p in (entry.gpu, "atlas", f"{heads} heads" if heads else "", ranges) if p)
    chart = (entry.gpu, "atlas", str(heads), ranges)
    found = []
    for _, group in groups:
        chosen = group[group["cell"].isin(common)].groupby("cell")[list(TIMES)].median()
        if chosen.empty:
            continue
        means = tuple(geomean(chosen[c]) for c in TIMES)
        found.append(choice_point(entry, chart, title, group, "cells", "ms, geomean over cells (p10-p90)",
                                  means, f"over {len(chosen)} cells"))
    return found


FAMILIES = {"kernel": kernel_points, "e2e": e2e_points, "replay": replay_points, "atlas": atlas_points}


def points(entry: Entry, run: Run, env: dict) -> list[Point]:
    """The run's points, by its kind (an e2e file is drawn as e2e whatever the entry says)."""
    return FAMILIES["e2e" if run.kind is E2E else entry.kind if entry.kind in FAMILIES else "kernel"](entry, run, env)
