"""Rows -> files: results.csv (written row by row), results.parquet, env.json, summary.md, plots.

The DataFrame is the only hand-off between measuring and reporting: everything here reads rows,
so `attnbench plot` / `compare` can rebuild any output from a saved results.csv.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pandas as pd

POINT_COLUMNS = [
    "kind", "num_tokens", "num_heads", "num_kv_heads", "head_dim", "dtype", "block_size", "causal",
    "context", "decode_share", "prefix_ratio", "spec_k", "prefill_len", "seed",
    "batch_tokens", "num_seqs", "num_decode_seqs", "max_kv_len", "total_kv_tokens", "lengths_rule",
]
RUN_COLUMNS = ["device", "gpu", "backend", "library", "library_version", "strategy", "mode", "l2"]
MEASURE_COLUMNS = [
    "median_ms", "p10_ms", "p90_ms", "samples", "calls_per_sample", "converged", "host_metadata_us", "host_plan_us",
    "kernel_launches", "gflop", "mbytes", "tflops", "gbps", "pct_of_peak", "peak_source",
    "rel_l2_error", "max_abs_error", "tolerance", "verdict", "reason", "samples_ms",
]
COLUMNS = POINT_COLUMNS + RUN_COLUMNS + MEASURE_COLUMNS
# what identifies a measurement across runs (compare matches rows on it)
KEY_COLUMNS = POINT_COLUMNS[:14] + ["backend", "strategy", "mode", "l2"]


class RowWriter:
    """Appends each row to results.csv as soon as it exists, flushing every time."""

    def __init__(self, out_dir: Path):
        self.path = out_dir / "results.csv"
        self._file = self.path.open("w", newline="")
        self._csv = csv.DictWriter(self._file, fieldnames=COLUMNS, extrasaction="ignore")
        self._csv.writeheader()
        self._file.flush()
        self.rows: list[dict] = []

    def write(self, row: dict) -> None:
        self.rows.append(row)
        self._csv.writerow({k: _cell(row.get(k)) for k in COLUMNS})
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _cell(value):
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return "" if value is None else value


def load_results(path: str | Path) -> pd.DataFrame:
    """A results directory, results.csv or results.parquet -> DataFrame."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.parquet" if (path / "results.parquet").exists() else path / "results.csv"
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    return pd.read_csv(path, keep_default_na=True, dtype={"reason": str, "samples_ms": str, "peak_source": str})


def write_env(out_dir: Path, env: dict) -> None:
    (out_dir / "env.json").write_text(json.dumps(env, indent=2, default=str) + "\n")


def write_parquet(df: pd.DataFrame, out_dir: Path) -> Path | None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return None
    path = out_dir / "results.parquet"
    df.to_parquet(path, index=False)
    return path


def seed_table(df: pd.DataFrame) -> pd.DataFrame:
    """The seed PR's table shape, one line per (kind, backend, mode, l2, point)."""
    measured = df[df["verdict"].isin(["pass", "fail"])]
    if measured.empty:
        return pd.DataFrame()
    # the hit ratio only shapes prefix batches: blank elsewhere, so other kinds don't show one
    measured = measured.assign(prefix_ratio=[f"{r:g}" if k == "prefix" else "-" for k, r in
                                             zip(measured["kind"], measured["prefix_ratio"])])
    index = ["kind", "backend", "mode", "l2", "prefix_ratio", "num_tokens", "num_heads", "num_kv_heads", "head_dim"]
    ms = measured.pivot_table(index=index, columns="strategy", values="median_ms", aggfunc="first")
    ok = measured.assign(ok=measured["verdict"].eq("pass")).pivot_table(
        index=index, columns="strategy", values="ok", aggfunc="all")
    table = pd.DataFrame(index=ms.index)
    table["unified ms"] = ms.get("unified")
    table["split ms"] = ms.get("split")
    table["split / unified"] = table["split ms"] / table["unified ms"]
    table["check"] = ok.all(axis=1).map({True: "pass", False: "FAIL"})
    table = table.reset_index().rename(columns={
        "num_tokens": "query tokens", "num_heads": "heads", "num_kv_heads": "kv heads", "head_dim": "head dim",
        "prefix_ratio": "prefix ratio"})
    if not (measured["kind"] == "prefix").any():
        table = table.drop(columns="prefix ratio")  # the ratio only shapes prefix batches
    return table


def format_ms(value) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


def md_lines(header, rows) -> list[str]:
    """A Markdown table: the header row, the rule, one line per row (cells already formatted)."""
    return ["| " + " | ".join(str(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|",
            *("| " + " | ".join(str(c) for c in row) + " |" for row in rows)]


def markdown_table(table: pd.DataFrame) -> str:
    if table.empty:
        return "_no measured rows_\n"
    shown = table.copy()
    for col in ("unified ms", "split ms"):
        shown[col] = shown[col].map(format_ms)
    shown["split / unified"] = shown["split / unified"].map(lambda r: "" if pd.isna(r) else f"{r:.3f}")
    return "\n".join(md_lines(shown.columns, shown.itertuples(index=False))) + "\n"


def write_summary(df: pd.DataFrame, out_dir: Path, env: dict) -> Path:
    gpu = (env.get("gpu") or {}).get("name", "CPU (reference backend only)")
    lines = [
        "# attnbench kernel summary\n",
        f"- command: `{env.get('command', '')}`",
        f"- device: {gpu}; torch {env.get('torch')}; attnbench {env.get('attnbench_version')}",
        "- times: median over samples (CUDA events; perf_counter on CPU); split / unified > 1 means unified is faster",
        "",
        markdown_table(seed_table(df)),
    ]
    problems = df[~df["verdict"].isin(["pass"])]
    if not problems.empty:
        columns = ["kind", "num_tokens", "num_heads", "head_dim", "backend", "strategy", "mode", "verdict", "reason"]
        lines += ["## Rows that did not pass\n",
                  *md_lines(["kind", "tokens", "heads", "dim", *columns[4:]],
                            problems[columns].itertuples(index=False)), ""]
    rules = df["lengths_rule"].dropna().drop_duplicates()
    if not rules.empty:
        lines += ["## How lengths were drawn\n", *[f"- {rule}" for rule in rules], ""]
    path = out_dir / "summary.md"
    path.write_text("\n".join(lines))
    return path
