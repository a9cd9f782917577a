"""PNG plots from e2e result rows: request latency vs batch size, and each strategy / unified.

One panel per (input, output) length pair. Overlaid runs (`attnbench plot A B`) carry a `run`
column with their label. Titles, legend, ticks and the ratio axis are figures.py's, as for the
kernel plots, so both kinds of picture say the same things about themselves.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from attnbench.results.figures import (backend_name, finish, line_label, oracle_backends, panels, ratio_y,
                                       ratios_to_unified, settings_text, swept_x, title)
from attnbench.results.styles import Styles
from attnbench.results.tables import format_params, ratio_names

MODEL = [("model", ""), ("params", "")]  # what was served: the titles' first line names it
SETTINGS = [("dtype", ""), ("mode", ""), ("chunk_size", "chunked prefill"),
            ("block_size", "block size"), ("iters", "measured runs per row, at most")]
BATCH = "batch size (concurrent requests)"
ROW = ["run", "backend", "mode", "input_len", "output_len", "batch_size"]
P50_INTERVAL = ("request_p50_ci_low_s", "request_p50_ci_high_s")  # each row's 95 % interval of its p50
BARS = {("rounds",): "dots and bars: the median of the run-by-run ratios (strategies measured in turns) and its 95 % "
                     "interval",
        ("rows",): "bars: the ratio's interval from the two rows' 95 % intervals of the p50",
        ("rounds", "rows"): "bars: 95 % intervals, of the run-by-run ratios where strategies ran in turns, else "
                            "from the two rows' intervals of the p50"}


PAIRED = ("vs_unified", "vs_unified_ci_low", "vs_unified_ci_high")  # rows measured in turns (e2e/turns.py)


def ratio_intervals(measured: pd.DataFrame, index: list[str] = ROW) -> pd.DataFrame:
    """Per `index` and strategy, its p50 over unified's and that ratio's interval: where the rows
    were measured in turns, the rounds' ratios' median and 95 % interval (`interval` "rounds");
    else the p50s' ratio and [low / unified's high, high / unified's low] from the two rows' 95 %
    intervals ("rows"); NaN where neither row has one. Empty without unified or another strategy."""
    ratios = ratios_to_unified(measured, index, "request_p50_s")
    if ratios.empty:
        return pd.DataFrame(columns=[*index, "strategy", "ratio", "low", "high", "interval"])
    have = [c for c in (*P50_INTERVAL, *PAIRED) if c in measured]
    wide = measured.pivot_table(index=index, columns="strategy", values=have, aggfunc="first") if have else None

    def column(name: str, strategy: str) -> pd.Series:
        present = wide is not None and name in wide.columns.get_level_values(0) and strategy in wide[name]
        return wide[name][strategy] if present else pd.Series(dtype=float)

    parts = []
    for strategy, g in ratios.groupby("strategy", sort=False):
        keyed = g.set_index(index)
        rows_low = (column(P50_INTERVAL[0], strategy) / column(P50_INTERVAL[1], "unified")).reindex(keyed.index)
        rows_high = (column(P50_INTERVAL[1], strategy) / column(P50_INTERVAL[0], "unified")).reindex(keyed.index)
        paired = [column(c, strategy).reindex(keyed.index) for c in PAIRED]
        rounds = paired[1].notna() & paired[2].notna()
        parts.append(keyed.assign(ratio=paired[0].where(rounds, keyed["ratio"]), low=paired[1].where(rounds, rows_low),
                                  high=paired[2].where(rounds, rows_high),
                                  interval=rounds.map({True: "rounds", False: "rows"})).reset_index())
    return pd.concat(parts, ignore_index=True)


def _measured(df: pd.DataFrame) -> pd.DataFrame:
    rows = df[df["verdict"].isin(["pass", "fail"])]
    rows = rows.assign(run=rows["run"] if "run" in rows else "")
    params = rows["params_b"].map(format_params) if "params_b" in rows else None
    chunks = rows["chunk_size"].where(rows["chunk_size"] > 0) if "chunk_size" in rows else None
    return rows.assign(**{k: v for k, v in (("params", params), ("chunk_size", chunks)) if v is not None})


def plot_e2e(df: pd.DataFrame, out_dir: Path) -> list[Path]:
    """e2e_latency.png and e2e_ratio.png (when a run has unified and another strategy); returns the files."""
    measured = _measured(df)
    pairs = sorted(set(zip(measured["input_len"], measured["output_len"])))
    if not pairs:
        return []
    oracles = oracle_backends()
    heading = (settings_text(measured, MODEL), settings_text(measured, SETTINGS))
    written = [_latency_figure(measured, pairs, oracles, heading, out_dir / "e2e_latency.png")]
    ratios = ratio_intervals(measured)
    if not ratios.empty:
        written.append(_ratio_figure(measured, ratios, pairs, oracles, heading, out_dir / "e2e_ratio.png"))
    return written


def _pair_axis(ax, pair, sizes) -> None:
    ax.set_title(f"input {pair[0]} / output {pair[1]} tokens", fontsize=10)
    swept_x(ax, sizes, BATCH, base=2)


def _latency_figure(measured, pairs, oracles, heading, path: Path) -> Path:
    fig, axes = panels(len(pairs))
    style = Styles()
    for ax, pair in zip(axes, pairs):
        sel = measured[(measured["input_len"] == pair[0]) & (measured["output_len"] == pair[1])]
        for (run, backend, strategy, mode), g in sel.groupby(["run", "backend", "strategy", "mode"]):
            g = g.sort_values("batch_size")
            name = line_label(run, backend_name(backend, oracles), mode, strategy)
            ax.errorbar(g["batch_size"], g["request_p50_s"], yerr=[0 * g["request_p50_s"],
                        g["request_p90_s"] - g["request_p50_s"]], capsize=2, **style(name, backend, strategy))
        ax.set_ylabel("p50 request latency, s (bar: p90)")
        _pair_axis(ax, pair, sel["batch_size"])
    model, settings = heading
    return finish(fig, axes, title(f"e2e request latency, {model}", measured, settings), path)


def _ratio_figure(measured, ratios, pairs, oracles, heading, path: Path) -> Path:
    fig, axes = panels(len(pairs))
    style = Styles()
    names = ratio_names(ratios["strategy"].unique())
    for ax, pair in zip(axes, pairs):
        sel = ratios[(ratios["input_len"] == pair[0]) & (ratios["output_len"] == pair[1])]
        for (run, backend, mode, strategy), g in sel.groupby(["run", "backend", "mode", "strategy"], sort=False):
            g = g.sort_values("batch_size")
            name = f"{line_label(run, backend_name(backend, oracles), mode)}: {strategy} / unified"
            yerr = [(g["ratio"] - g["low"]).fillna(0).clip(lower=0), (g["high"] - g["ratio"]).fillna(0).clip(lower=0)]
            ax.errorbar(g["batch_size"], g["ratio"], yerr=yerr if g["low"].notna().any() else None, capsize=3,
                        **style(name, backend, strategy))
        ratio_y(ax, sel["ratio"], sel["low"], sel["high"], f"{names} (> 1: unified faster)")
        _pair_axis(ax, pair, sel["batch_size"])
    bars = (BARS[tuple(sorted(set(ratios.loc[ratios["low"].notna(), "interval"])))] if ratios["low"].notna().any()
            else "no interval: the rows hold no interval of their p50 (too few measured runs)")
    model, settings = heading
    return finish(fig, axes, title(f"e2e {names} of p50 request latency, {model}", measured, settings, bars), path)
