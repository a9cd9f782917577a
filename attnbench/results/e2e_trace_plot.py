"""The picture of a served trace: the CDF of each request's TTFT and TPOT, one line per choice.

Why a CDF: a trace's requests differ in length and arrive into different loads, so a choice is a
distribution, and the p50 and p99 the table gives are two points on it. Title, legend and the CPU
mark are figures.py's, as for every attnbench picture.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from attnbench.results.figures import Palette, backend_name, finish, line_label, oracle_backends, panels, plain_log_x, settings_text, title
from attnbench.results.tables import LINESTYLES, format_params

SETTINGS = [("model", ""), ("params", ""), ("dtype", ""), ("arrivals", "arrivals"), ("max_num_seqs", "running at most"),
            ("chunk_size", "chunked prefill")]
PANELS = [("ttft_ms", "TTFT, ms (first token - arrival)"), ("tpot_ms", "TPOT, ms ((E2EL - TTFT) / (output - 1))")]


def plot_trace(rows: pd.DataFrame, requests: pd.DataFrame, path: Path) -> Path:
    """trace_latency.png: per panel, the share of requests at or below each latency, per choice."""
    rows = rows.assign(params=rows["params_b"].map(format_params),
                       chunk_size=rows["chunk_size"].where(rows["chunk_size"] > 0))
    fig, axes = panels(len(PANELS), width=5.4)
    color, oracles = Palette(), oracle_backends()
    for ax, (column, label) in zip(axes, PANELS):
        for (backend, strategy, mode), g in requests.groupby(["backend", "strategy", "mode"], sort=False):
            values = np.sort(g[column].dropna().to_numpy())
            if not len(values):
                continue
            name = line_label(backend_name(backend, oracles), mode, strategy)
            ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", color=color(name),
                    linestyle=LINESTYLES.get(strategy, ":"), label=name)
        plain_log_x(ax)
        ax.set_xlabel(label)
        ax.set_ylabel("share of requests")
        ax.set_ylim(0, 1.02)
    count = int(rows["requests"].dropna().max()) if "requests" in rows and rows["requests"].notna().any() else 0
    return finish(fig, axes, title("e2e --trace: per-request TTFT and TPOT", rows, settings_text(rows, SETTINGS),
                                   f"CDF over the {count} requests of one measured serve per choice"), path)
