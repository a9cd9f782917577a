"""The pictures of a served trace: each request's TTFT and TPOT as a CDF, and each metric over the serves.

Why a CDF: a trace's requests differ in length and arrive into different loads, so a choice is a
distribution, and the p50 and p99 the table gives are two points on it. Why the metrics picture:
a choice was served several times, and how far its serves landed apart is what says whether two
choices (or two runs, overlaid) differ; it is drawn from results.csv alone, so `attnbench plot`
redraws it for any number of runs. Title, legend and the CPU mark are figures.py's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from attnbench.results.figures import (backend_name, finish, line_label, oracle_backends, panels, plain_log_x,
                                       plain_log_y, settings_text, title)
from attnbench.results.styles import Styles
from attnbench.results.tables import format_params

SERVED = [("trace", ""), ("model", ""), ("params", "")]  # the title's first line: which trace, served by what
SETTINGS = [("dtype", ""), ("mode", ""), ("arrivals", "arrivals"), ("max_num_seqs", "running at most"),
            ("chunk_size", "chunked prefill")]
METRIC_PANELS = ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "itl_p50", "e2el_p50")
PANELS = [("ttft_ms", "TTFT, ms (first token - arrival)"), ("tpot_ms", "TPOT, ms ((E2EL - TTFT) / (output - 1))")]


def plot_metrics(metrics: pd.DataFrame, path: Path) -> Path | None:
    """trace_metrics.png from results.csv rows (a `run` column when several runs are overlaid): per
    metric, each choice's median over its serves, the bar from the fewest to the most."""
    timed = metrics[metrics["verdict"].isin(["pass", "fail"]) & metrics["metric"].isin(METRIC_PANELS)]
    if timed.empty:
        return None
    timed = timed.assign(run=timed["run"] if "run" in timed else "", chunk_size=timed["chunk_size"].where(
        timed["chunk_size"] > 0))
    fig, axes = panels(len(METRIC_PANELS), width=4.2)
    style, oracles = Styles(), oracle_backends()
    groups = list(timed.groupby(["run", "backend", "mode", "strategy"], sort=False))
    for ax, metric in zip(axes, METRIC_PANELS):
        for x, ((run, backend, mode, strategy), g) in enumerate(groups):
            r = g[g["metric"] == metric]
            if r.empty:
                continue
            r = r.iloc[0]
            name = line_label(run, backend_name(backend, oracles), mode, strategy)
            ax.errorbar([x], [r["serve_median_ms"]], yerr=[[r["serve_median_ms"] - r["serve_min_ms"]],
                        [r["serve_max_ms"] - r["serve_median_ms"]]], capsize=3, **style(name, backend, strategy))
        ax.set_xticks([])
        ax.set_xlim(-0.5, len(groups) - 0.5)
        ax.set_xlabel("choice (one position each; legend)")
        ax.set_title(metric.replace("_", " "), fontsize=10)
        plain_log_y(ax, "ms: median over serves (bar: min-max)")
    serves = int(timed["serves"].max())
    return finish(fig, axes, title(_what("metrics over the serves", timed), timed, settings_text(timed, SETTINGS),
                                   f"each choice served up to {serves} times"), path)


def _what(what: str, rows: pd.DataFrame) -> str:
    """'e2e --trace <what>: chat-high.jsonl, llama-3-8b, 8.03 B params': the trace by its file's name."""
    if "trace" in rows:
        rows = rows.assign(trace=rows["trace"].map(lambda t: Path(str(t)).name))
    served = settings_text(rows, [s for s in SERVED if s[0] in rows])
    return f"e2e --trace {what}" + (f": {served}" if served else "")


def plot_trace(rows: pd.DataFrame, requests: pd.DataFrame, path: Path) -> Path:
    """trace_latency.png: per panel, the share of requests at or below each latency, per choice."""
    rows = rows.assign(params=rows["params_b"].map(format_params),
                       chunk_size=rows["chunk_size"].where(rows["chunk_size"] > 0))
    fig, axes = panels(len(PANELS), width=5.4)
    style, oracles = Styles(), oracle_backends()
    for ax, (column, label) in zip(axes, PANELS):
        for (backend, strategy, mode), g in requests.groupby(["backend", "strategy", "mode"], sort=False):
            values = np.sort(g[column].dropna().to_numpy())
            if not len(values):
                continue
            name = line_label(backend_name(backend, oracles), mode, strategy)
            ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post",
                    markevery=max(1, len(values) // 8), **style(name, backend, strategy))
        plain_log_x(ax)
        ax.set_xlabel(label)
        ax.set_ylabel("share of requests")
        ax.set_ylim(0, 1.02)
    count = int(rows["requests"].dropna().max()) if "requests" in rows and rows["requests"].notna().any() else 0
    return finish(fig, axes, title(_what("per-request TTFT and TPOT", rows), rows, settings_text(rows, SETTINGS),
                                   f"CDF over the {count} requests of every measured serve per choice, pooled"), path)
