"""Saved results -> the formats other tools read: github-action-benchmark and Bencher JSON, Markdown, CSV, plots.

Everything starts from the rows of a results.csv / results.parquet, never from a live run, so a
CI job can run a scenario once and publish it in every format afterwards. Kernel sweeps and e2e
runs (attnbench e2e) both export and plot; each format takes the kind of the rows it is given.

`by_setting` exists because the seed-shaped table and the plots lay out kind, tokens, shape,
backend, strategy and mode only: rows that differ in another key column (context length, prefix
ratio, ...) would land in one cell. Splitting on those columns first keeps every row visible.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd

from attnbench.results.e2e_plots import plot_e2e
from attnbench.results.e2e_trace_plot import plot_metrics
from attnbench.results.e2e_report import e2e_markdown, e2e_table
from attnbench.errors import AttnbenchError, UsageError
from attnbench.kernels.workload import KIND_SETTINGS
from attnbench.results.compare import row_label
from attnbench.results.files import COLUMNS, KEY_COLUMNS
from attnbench.results.tables import markdown_table, ratio_clause, seed_table
from attnbench.results.plots import plot_runs
from attnbench.results.replay_plots import plot_replay
from attnbench.e2e.serve_metrics import TRACE_METRICS
from attnbench.results.trace_results import metrics_table, trace_gab_entries
from attnbench.results.read import E2E, KERNEL, MEASURED, TRACE, ResultKind, Run, canonical

# what seed_table and plot_runs lay out (and, for prefix rows, the prefix ratio); any other key
# column that varies splits the rows
LAID_OUT = ("kind", "num_tokens", "num_heads", "num_kv_heads", "head_dim", "backend", "strategy", "mode", "l2")
LAID_OUT_FOR_KIND = {"prefix": ("prefix_ratio",)}
POINT = ("kind", "num_tokens", "num_heads", "num_kv_heads", "head_dim", "dtype", "block_size", "causal")
RUN = ("backend", "strategy", "mode", "l2")
E2E_NAME_FIELDS = ("model", "dtype", "input_len", "output_len", "batch_size", "block_size", "chunk_size")  # gab names


def by_setting(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(label, rows) groups, one per value of the key columns that vary but are not laid out."""
    groups: dict[str, list[pd.DataFrame]] = {}
    for kind, rows in df.groupby("kind", sort=False):
        laid_out = (*LAID_OUT, *LAID_OUT_FOR_KIND.get(kind, ()))
        varying = [c for c in KEY_COLUMNS if c not in laid_out and c in rows and rows[c].map(canonical).nunique() > 1]
        if not varying:
            groups.setdefault("", []).append(rows)
            continue
        for _, sub in rows.groupby(varying, sort=True, dropna=False):
            groups.setdefault(row_label(sub.iloc[0], varying), []).append(sub)
    return [(label, pd.concat(parts)) for label, parts in groups.items()]


def seed_tables(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    return [(label, seed_table(rows)) for label, rows in by_setting(df)]


def plot_results(runs: list[tuple[str, pd.DataFrame]], out_dir: Path, kind: ResultKind = KERNEL,
                 steps: pd.DataFrame | None = None, trace: str = "") -> list[Path]:
    """plot_runs over several runs, each split by setting so no two settings share a line; e2e runs
    with plot_e2e, each run's label in a `run` column; a replay run (one, with its buckets.csv as
    `steps` and the `trace` it replayed) with replay's own pictures, since its buckets are no sweep
    of one shape."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise AttnbenchError(f"cannot write plots into {out_dir}: it is a file, not a directory")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        if steps is not None:
            return plot_replay(runs[0][1], steps, out_dir, trace)
        if kind is TRACE:
            drawn = plot_metrics(pd.concat([df.assign(run=label) for label, df in runs]), out_dir / "trace_metrics.png")
            return [drawn] if drawn else []
        if kind is E2E:
            return plot_e2e(pd.concat([df.assign(run=label) for label, df in runs], ignore_index=True), out_dir)
        split = [(" ".join(p for p in (label, setting) if p), rows)
                 for label, df in runs for setting, rows in by_setting(df)]
        return plot_runs(split, out_dir)
    except OSError as exc:  # mkdir or savefig: a path under a file, no permission, a full disk
        raise AttnbenchError(f"cannot write plots into {out_dir}: {exc.strerror or exc}") from None


# ---- github-action-benchmark ----------------------------------------------------------------------

def benchmark_name(row) -> str:
    """Stable across runs: every key column that shapes the batch, whatever else the run swept."""
    point = [*POINT, *KIND_SETTINGS.get(row["kind"], ()), "seed"]
    return f"{row_label(row, point)} | {row_label(row, RUN)}"


def _unique_names(df: pd.DataFrame) -> list[str]:
    names = pd.Series([benchmark_name(r) for _, r in df.iterrows()], index=df.index)
    for name, rows in df.groupby(names, sort=False):
        if len(rows) > 1:  # rows that differ only in a column their kind ignores: name that column too
            varying = [c for c in KEY_COLUMNS if rows[c].map(canonical).nunique() > 1]
            for i, row in rows.iterrows():
                names[i] = f"{name} | {row_label(row, varying)}"
    return list(names)


def _number(value, spec: str = ".4g") -> str:
    return "" if pd.isna(value) else format(value, spec)


def gab_entries(df: pd.DataFrame) -> list[dict]:
    """customSmallerIsBetter entries for the timed rows: value = median ms, range = ± half the p10..p90 spread."""
    timed = df[df["verdict"].isin(MEASURED)]
    entries = []
    for name, (_, r) in zip(_unique_names(timed), timed.iterrows()):
        extra = {"p10 ms": _number(r["p10_ms"]), "p90 ms": _number(r["p90_ms"]), "samples": _number(r["samples"], ".0f"),
                 "check": r["verdict"], "gpu": r["gpu"], "library": f"{r['library']} {r['library_version']}",
                 "TFLOP/s": _number(r["tflops"]), "GB/s": _number(r["gbps"])}
        entries.append({"name": name, "unit": "ms", "value": float(r["median_ms"]),
                        "range": f"± {_number((r['p90_ms'] - r['p10_ms']) / 2)}",
                        "extra": "\n".join(f"{k}: {v}" for k, v in extra.items())})
    return entries


def e2e_gab_entries(df: pd.DataFrame) -> list[dict]:
    """customSmallerIsBetter entries for timed e2e rows: value = p50 request latency in seconds."""
    entries = []
    for _, r in df[df["verdict"].isin(MEASURED)].iterrows():
        extra = {"p90 s": _number(r["request_p90_s"]), "p99 s": _number(r["request_p99_s"]),
                 "output tok/s": _number(r["output_tok_s"]), "check": r["verdict"], "gpu": r["gpu"],
                 "library": f"{r['library']} {r['library_version']}"}
        entries.append({"name": f"e2e {row_label(r, E2E_NAME_FIELDS)} | {row_label(r, RUN[:3])}", "unit": "s",
                        "value": float(r["request_p50_s"]), "extra": "\n".join(f"{k}: {v}" for k, v in extra.items())})
    return entries


def entries_of(df: pd.DataFrame, kind: ResultKind) -> list[dict]:
    return {E2E: e2e_gab_entries, TRACE: trace_gab_entries}.get(kind, gab_entries)(df)


def to_gab(df: pd.DataFrame, kind: ResultKind = KERNEL) -> str:
    return json.dumps(entries_of(df, kind), indent=2) + "\n"


# ---- Bencher Metric Format --------------------------------------------------------------------------

NS_PER = {"ms": 1e6, "s": 1e9}  # Bencher's built-in `latency` measure is in nanoseconds
KERNEL_RATES = (("throughput", "tflops", 1e12), ("bandwidth-gb-s", "gbps", 1.0))  # measure, column, to its unit


def _metric(value: float, low: float, high: float, scale: float) -> dict:
    """A BMF metric; bounds only where both are finite numbers."""
    metric = {"value": float(value) * scale}
    if math.isfinite(low) and math.isfinite(high):
        metric.update(lower_value=float(low) * scale, upper_value=float(high) * scale)
    return metric


def _float(row, column: str) -> float:
    """A row's number in `column`; NaN where the column is missing, empty or no number."""
    value = pd.to_numeric(row.get(column) if column else None, errors="coerce")
    return math.nan if value is None or pd.isna(value) else float(value)


def bmf_measures(row, kind: ResultKind) -> dict:
    """A timed row's Bencher measures: `latency` in ns within the row's interval (p10..p90; e2e
    p50..p90); where the row has a rate, Bencher's built-in `throughput` (operations/s: a kernel's
    FLOP/s, an e2e run's output tokens/s) and a kernel's `bandwidth-gb-s`. A kernel's rates are the
    same work over the latency's bounds, so their bounds are rate x median / p90 .. rate x median / p10."""
    low_col, high_col = kind.spread
    value = float(row[kind.measure])
    low, high = (_float(row, low_col) if low_col else value), _float(row, high_col)
    found = {"latency": _metric(value, low, high, NS_PER[kind.unit])}
    if kind is KERNEL:
        for name, column, scale in KERNEL_RATES:
            rate = _float(row, column)
            if math.isfinite(rate) and rate > 0:
                found[name] = _metric(rate, rate * value / high if high > 0 else math.nan,
                                      rate * value / low if low > 0 else math.nan, scale)
    elif kind is E2E and math.isfinite(rate := _float(row, "output_tok_s")):
        found["throughput"] = {"value": rate}  # no interval: results.csv holds one rate per row
    return found


def to_bmf(df: pd.DataFrame, kind: ResultKind = KERNEL) -> str:
    """Bencher Metric Format: {benchmark name: {measure: {value, lower_value, upper_value}}}, named
    as the gab entries are (a series keeps its name from run to run); bmf_measures says which."""
    entries = entries_of(df, kind)
    timed = df[df["verdict"].isin(MEASURED)]
    report = {entry["name"]: bmf_measures(row, kind) for entry, (_, row) in zip(entries, timed.iterrows())}
    return json.dumps(report, indent=2) + "\n"


def to_markdown(df: pd.DataFrame, kind: ResultKind = KERNEL) -> str:
    """The seed-shaped table, one per setting (context, prefix ratio, ...) when the run swept one;
    for an e2e run, its table of p50 request latency per strategy."""
    gpu = ", ".join(sorted(set(df["gpu"].dropna().astype(str))))
    libraries = ", ".join(sorted({f"{b} ({lib} {v})" for b, lib, v in
                                  df[["backend", "library", "library_version"]].dropna().itertuples(index=False)}))
    meaning = ratio_clause(df["strategy"].dropna().unique())
    if kind is TRACE:
        return (f"**{gpu}**: {libraries}; served trace, each metric's median over the serves (min-max), ms\n\n"
                + e2e_markdown(metrics_table(df, TRACE_METRICS)))
    if kind is E2E:
        return f"**{gpu}**: {libraries}; p50 request latency, s{meaning}\n\n" + e2e_markdown(e2e_table(df))
    lines = [f"**{gpu}**: {libraries}; median ms{meaning}", ""]
    for label, table in seed_tables(df):
        if label:
            lines += [f"#### {label}", ""]
        lines += [markdown_table(table)]
    return "\n".join(lines)


def to_csv(df: pd.DataFrame, kind: ResultKind = KERNEL) -> str:
    """results.csv's columns and order, so `compare` and `plot` read the export like a run."""
    return (df if kind in (E2E, TRACE) else df[[c for c in COLUMNS if c in df.columns]]).to_csv(index=False)


FORMATS = {"gab": to_gab, "bmf": to_bmf, "md": to_markdown, "csv": to_csv}


def refuse_an_input(path: Path, flag: str, inputs: list[Run]) -> None:
    """Refuse an output path that is one of the runs being read: a results file, its env.json, or
    the run's directory (plots written there would replace that run's own pictures)."""
    sources = {os.path.realpath(run.source.parent / name) for run in inputs
               for name in (run.source.name, "results.csv", "results.parquet", "env.json", "")}
    if os.path.realpath(path) in sources:
        raise UsageError(f"{flag}: {path} is part of the results being read; writing it would overwrite them")


def write_output(path: Path, text: str, flag: str, inputs: list[Run]) -> None:
    """Write a tool's output file; refuse a path that is one of the runs it was made from, a
    directory, or a symlink (opened with O_NOFOLLOW: a link is never written through). Not renamed
    into place: the path may be a device or a pipe a user chose (/dev/stderr's target, a FIFO)."""
    refuse_an_input(path, flag, inputs)
    if os.path.islink(path):
        raise UsageError(f"{flag}: {path} is a symlink; give a file path (a link is never written through)")
    if os.path.isdir(path):
        raise UsageError(f"{flag}: {path} is a directory; give a file path")
    try:
        # O_NONBLOCK: a FIFO nobody reads is refused (ENXIO) instead of hanging; no effect on files
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        fd = os.open(path, flags, 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise UsageError(f"{flag}: cannot write {path}: {exc.strerror or exc}") from None
