"""Saved results -> the formats other tools read: github-action-benchmark JSON, Markdown, CSV, plots.

Everything starts from the rows of a results.csv / results.parquet, never from a live run, so a
CI job can run a scenario once and publish it in every format afterwards.

`by_setting` exists because the seed-shaped table and the plots lay out kind, tokens, shape,
backend, strategy and mode only: rows that differ in another key column (context length, prefix
ratio, ...) would land in one cell. Splitting on those columns first keeps every row visible.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from attnbench.results.compare import MEASURED, canonical, row_label
from attnbench.results.plots import plot_runs
from attnbench.results.files import COLUMNS, KEY_COLUMNS, markdown_table, seed_table

# what seed_table and plot_runs lay out (and, for prefix rows, the prefix ratio); any other key
# column that varies splits the rows
LAID_OUT = ("kind", "num_tokens", "num_heads", "num_kv_heads", "head_dim", "backend", "strategy", "mode", "l2")
LAID_OUT_FOR_KIND = {"prefix": ("prefix_ratio",)}
# the key columns that shape each kind's batch (workload.build_batch); the others do not change it
KIND_SETTINGS = {"decode": ("context",), "specdec": ("spec_k", "context"), "prefill": ("prefill_len",),
                 "prefix": ("prefill_len", "prefix_ratio"), "mixed": ("decode_share", "context")}
POINT = ("kind", "num_tokens", "num_heads", "num_kv_heads", "head_dim", "dtype", "block_size", "causal")
RUN = ("backend", "strategy", "mode", "l2")


def by_setting(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(label, rows) groups, one per value of the key columns that vary but are not laid out."""
    groups: dict[str, list[pd.DataFrame]] = {}
    for kind, rows in df.groupby("kind", sort=False):
        laid_out = (*LAID_OUT, *LAID_OUT_FOR_KIND.get(kind, ()))
        varying = [c for c in KEY_COLUMNS if c not in laid_out and rows[c].map(canonical).nunique() > 1]
        if not varying:
            groups.setdefault("", []).append(rows)
            continue
        for _, sub in rows.groupby(varying, sort=True, dropna=False):
            groups.setdefault(row_label(sub.iloc[0], varying), []).append(sub)
    return [(label, pd.concat(parts)) for label, parts in groups.items()]


def seed_tables(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    return [(label, seed_table(rows)) for label, rows in by_setting(df)]


def plot_results(runs: list[tuple[str, pd.DataFrame]], out_dir: Path) -> list[Path]:
    """plot_runs over several runs, each split by setting so no two settings share a line."""
    out_dir.mkdir(parents=True, exist_ok=True)
    split = [(" ".join(p for p in (label, setting) if p), rows)
             for label, df in runs for setting, rows in by_setting(df)]
    return plot_runs(split, out_dir)


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
        extra = {"p10 ms": _number(r["p10_ms"]), "p90 ms": _number(r["p90_ms"]), "samples": int(r["samples"]),
                 "check": r["verdict"], "gpu": r["gpu"], "library": f"{r['library']} {r['library_version']}",
                 "TFLOP/s": _number(r["tflops"]), "GB/s": _number(r["gbps"])}
        entries.append({"name": name, "unit": "ms", "value": float(r["median_ms"]),
                        "range": f"± {_number((r['p90_ms'] - r['p10_ms']) / 2)}",
                        "extra": "\n".join(f"{k}: {v}" for k, v in extra.items())})
    return entries


def to_gab(df: pd.DataFrame) -> str:
    return json.dumps(gab_entries(df), indent=2) + "\n"


def to_markdown(df: pd.DataFrame) -> str:
    """The seed-shaped table, one per setting (context, prefix ratio, ...) when the run swept one."""
    gpu = ", ".join(sorted(set(df["gpu"].dropna().astype(str))))
    libraries = ", ".join(sorted({f"{b} ({lib} {v})" for b, lib, v in
                                  df[["backend", "library", "library_version"]].dropna().itertuples(index=False)}))
    lines = [f"**{gpu}**: {libraries}; median ms; split / unified > 1 means unified is faster", ""]
    for label, table in seed_tables(df):
        if label:
            lines += [f"#### {label}", ""]
        lines += [markdown_table(table)]
    return "\n".join(lines)


def to_csv(df: pd.DataFrame) -> str:
    """results.csv's columns and order, so `compare` and `plot` read the export like a run."""
    return df[[c for c in COLUMNS if c in df.columns]].to_csv(index=False)


FORMATS = {"gab": to_gab, "md": to_markdown, "csv": to_csv}
