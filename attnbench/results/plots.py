"""PNG plots from kernel result rows: latency vs query tokens, and each strategy / unified ratio.

One figure per (heads, kv heads, head dim), one panel per batch kind. Several runs can be overlaid
(two GPUs, two library versions): each run's label prefixes its lines. What the figures say about
themselves (title, legend, ticks, the ratio axis) is figures.py's, shared with the e2e plots.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from attnbench.kernels.workload import KINDS
from attnbench.results.figures import (backend_name, finish, line_label, oracle_backends, panels, plain_log_y,
                                       ratio_y, ratios_to_unified, settings_text, shape_text, swept_x, title)
from attnbench.results.notes import CONFIDENCE, ratio_intervals
from attnbench.results.styles import Styles
from attnbench.results.tables import ratio_names

SHAPE = ["num_heads", "num_kv_heads", "head_dim"]
SETTINGS = [("dtype", ""), ("context", "context"), ("mode", ""), ("l2", "L2")]
TOKENS = "query tokens per batch (N)"
GROUP = ["kind", "backend", "mode", "prefix_ratio", "num_tokens"]


def _measured(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["verdict"].isin(["pass", "fail"])]


def _shape_name(heads, kv_heads, dim) -> str:
    return f"h{heads}" + (f"kv{kv_heads}" if kv_heads != heads else "") + f"_d{dim}"


def plot_runs(runs: list[tuple[str, pd.DataFrame]], out_dir: Path) -> list[Path]:
    """Draw latency and ratio figures for every shape found in the runs; returns the files."""
    runs = [(label, _measured(df)) for label, df in runs]
    shapes = sorted({tuple(s) for _, df in runs for s in df[SHAPE].drop_duplicates().itertuples(index=False)})
    written: list[Path] = []
    oracles = oracle_backends()
    for shape in shapes:
        heads, kv_heads, dim = shape
        per_run = [(label, df[(df[SHAPE] == list(shape)).all(axis=1)]) for label, df in runs]
        kinds = [k for k in KINDS if any(k in set(df["kind"]) for _, df in per_run)]
        if not kinds:
            continue
        rows = pd.concat([df for _, df in per_run])
        heading = (shape_text(heads, kv_heads, dim), rows)
        written.append(_latency_figure(per_run, kinds, heading, oracles, out_dir / f"latency_{_shape_name(*shape)}.png"))
        ratio = _ratio_figure(per_run, kinds, heading, oracles, out_dir / f"ratio_{_shape_name(*shape)}.png")
        if ratio:
            written.append(ratio)
    return written


def _hit_tag(df: pd.DataFrame):
    several = df.loc[df["kind"] == "prefix", "prefix_ratio"].nunique() > 1
    return lambda kind, hit: f"hit {hit:g}" if kind == "prefix" and several else ""


def _latency_figure(per_run, kinds, heading, oracles, path: Path) -> Path:
    fig, axes = panels(len(kinds))
    axes = dict(zip(kinds, axes))
    style = Styles()
    for run, df in per_run:
        tag = _hit_tag(df)
        for (kind, backend, strategy, mode, hit), g in df.groupby(["kind", "backend", "strategy", "mode", "prefix_ratio"]):
            g = g.sort_values("num_tokens")
            name = line_label(run, backend_name(backend, oracles), mode, tag(kind, hit), strategy)
            axes[kind].errorbar(g["num_tokens"], g["median_ms"],
                                yerr=[g["median_ms"] - g["p10_ms"], g["p90_ms"] - g["median_ms"]],
                                capsize=2, **style(name, backend, strategy))
    for kind, ax in axes.items():
        plain_log_y(ax, "median latency, ms (bars: p10-p90)")
        _kind_axis(ax, kind, per_run)
    shape, rows = heading
    what = f"attention latency, {shape}"
    return finish(fig, list(axes.values()), title(what, rows, settings_text(rows, SETTINGS)), path)


def _kind_axis(ax, kind: str, per_run) -> None:
    swept = {n for _, df in per_run for n in df.loc[df["kind"] == kind, "num_tokens"]}
    ax.set_title(kind, fontsize=10)
    swept_x(ax, swept, TOKENS)


def strategy_ratios(df: pd.DataFrame) -> pd.DataFrame:
    """Each strategy's median over unified's per point, backend and mode; with replicates, the
    median of the paired replicates' ratios and its interval (notes.ratio_intervals) instead."""
    ratios = ratios_to_unified(df, GROUP, "median_ms")
    if ratios.empty:
        return ratios
    ratios = ratios.assign(low=float("nan"), high=float("nan"))
    intervals = ratio_intervals(df)
    if intervals.empty:
        return ratios
    intervals = intervals.assign(strategy=intervals["ratio"].str.split(" / ").str[0]).drop(columns="ratio")
    merged = ratios.merge(intervals[[*GROUP, "strategy", "median", "low", "high"]], on=[*GROUP, "strategy"],
                          how="left", suffixes=("_none", ""))
    merged["ratio"] = merged["median"].fillna(merged["ratio"])
    return merged.drop(columns=["median", "low_none", "high_none"])


def _ratio_figure(per_run, kinds, heading, oracles, path: Path) -> Path | None:
    all_ratios = [(run, strategy_ratios(df)) for run, df in per_run]
    if all(r.empty for _, r in all_ratios):
        return None
    fig, axes = panels(len(kinds))
    axes = dict(zip(kinds, axes))
    style = Styles()
    with_interval = False
    for run, ratios in all_ratios:
        if ratios.empty:
            continue
        tag = _hit_tag(ratios)
        for (kind, backend, mode, hit, strategy), g in ratios.groupby(["kind", "backend", "mode", "prefix_ratio",
                                                                        "strategy"]):
            g = g.sort_values("num_tokens")
            name = f"{line_label(run, backend_name(backend, oracles), mode, tag(kind, hit))}: {strategy} / unified"
            bars = g["low"].notna().any()
            with_interval |= bars
            yerr = [(g["ratio"] - g["low"]).fillna(0).clip(lower=0), (g["high"] - g["ratio"]).fillna(0).clip(lower=0)]
            axes[kind].errorbar(g["num_tokens"], g["ratio"], yerr=yerr if bars else None, capsize=3,
                                **style(name, backend, strategy))
    rows = pd.concat([r for _, r in all_ratios if not r.empty])
    names = ratio_names(rows["strategy"].unique())
    clipped = False
    for kind, ax in axes.items():
        sel = rows[rows["kind"] == kind]
        clipped |= ratio_y(ax, sel["ratio"], sel["low"], sel["high"], f"{names} time (> 1: unified faster)")
        _kind_axis(ax, kind, per_run)
    bars = (f"bars: {CONFIDENCE:.0%} interval over paired replicates"
            + ("; a bar leaving the panel is wider than shown" if clipped else "") if with_interval
            else "no interval: one replicate per row; --replicates 3 gives one")
    shape, measured = heading
    what = f"{names} time ratio, {shape}"
    return finish(fig, list(axes.values()), title(what, measured, settings_text(measured, SETTINGS), bars), path)
