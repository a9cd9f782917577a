"""PNG plots from result rows: latency vs query tokens, and each strategy / unified ratio.

One figure per (heads, kv heads, head dim), one panel per batch kind. Several runs can be overlaid
(two GPUs, two library versions): each run's label prefixes its lines.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from attnbench.kernels.workload import KINDS  # noqa: E402
from attnbench.results.tables import LINESTYLES, strategies_in  # noqa: E402

SHAPE = ["num_heads", "num_kv_heads", "head_dim"]


def _measured(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["verdict"].isin(["pass", "fail"])]


def _shape_name(heads, kv_heads, dim) -> str:
    return f"h{heads}" + (f"kv{kv_heads}" if kv_heads != heads else "") + f"_d{dim}"


def _panels(kinds: list[str]):
    cols = min(3, len(kinds))
    rows = -(-len(kinds) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    flat = list(axes.flat)
    for unused in flat[len(kinds):]:
        unused.set_visible(False)
    return fig, dict(zip(kinds, flat))


def _label(run: str, *parts) -> str:
    return " ".join(p for p in (run, *parts) if p)


def plot_runs(runs: list[tuple[str, pd.DataFrame]], out_dir: Path) -> list[Path]:
    """Draw latency and ratio figures for every shape found in the runs; returns the files."""
    runs = [(label, _measured(df)) for label, df in runs]
    shapes = sorted({tuple(s) for _, df in runs for s in df[SHAPE].drop_duplicates().itertuples(index=False)})
    written: list[Path] = []
    for shape in shapes:
        heads, kv_heads, dim = shape
        per_run = [(label, df[(df[SHAPE] == list(shape)).all(axis=1)]) for label, df in runs]
        kinds = [k for k in KINDS if any(k in set(df["kind"]) for _, df in per_run)]
        if not kinds:
            continue
        title = f"{heads} heads" + (f" / {kv_heads} kv" if kv_heads != heads else "") + f", head dim {dim}"
        written.append(_latency_figure(per_run, kinds, title, out_dir / f"latency_{_shape_name(*shape)}.png"))
        ratio = _ratio_figure(per_run, kinds, title, out_dir / f"ratio_{_shape_name(*shape)}.png")
        if ratio:
            written.append(ratio)
    return written


def _latency_figure(per_run, kinds, title, path: Path) -> Path:
    fig, axes = _panels(kinds)
    for run, df in per_run:
        several_ratios = df.loc[df["kind"] == "prefix", "prefix_ratio"].nunique() > 1
        for (kind, backend, strategy, mode, ratio), g in df.groupby(["kind", "backend", "strategy", "mode", "prefix_ratio"]):
            g = g.sort_values("num_tokens")
            tag = f"hit {ratio:g}" if kind == "prefix" and several_ratios else ""
            style = LINESTYLES.get(strategy, ":")
            marker = "o" if mode == "graph" else "s"
            ax = axes[kind]
            ax.errorbar(g["num_tokens"], g["median_ms"],
                        yerr=[g["median_ms"] - g["p10_ms"], g["p90_ms"] - g["median_ms"]],
                        linestyle=style, marker=marker, capsize=2, label=_label(run, backend, strategy, mode, tag))
    for ax in axes.values():
        ax.set_yscale("log")
    return _finish(fig, axes, kinds, "median ms (p10-p90 bars)", f"attention latency: {title}", path)


def _ratio_figure(per_run, kinds, title, path: Path) -> Path | None:
    fig, axes = _panels(kinds)
    drawn = False
    for run, df in per_run:
        several_ratios = df.loc[df["kind"] == "prefix", "prefix_ratio"].nunique() > 1
        ms = df.pivot_table(index=["kind", "backend", "mode", "prefix_ratio", "num_tokens"], columns="strategy",
                            values="median_ms", aggfunc="first")
        others = [s for s in strategies_in(ms.columns) if s != "unified"]
        if "unified" not in ms.columns:
            continue
        for strategy in others:  # each strategy against unified: a line per (strategy, backend, mode)
            ratio = (ms[strategy] / ms["unified"]).dropna().reset_index(name="ratio")
            for (kind, backend, mode, hit), g in ratio.groupby(["kind", "backend", "mode", "prefix_ratio"]):
                tag = f"hit {hit:g}" if kind == "prefix" and several_ratios else ""
                name = strategy if len(others) > 1 else ""
                axes[kind].plot(g["num_tokens"], g["ratio"], marker="o", linestyle=LINESTYLES.get(strategy, ":"),
                                label=_label(run, backend, mode, name, tag))
                drawn = True
    if not drawn:
        plt.close(fig)
        return None
    for ax in axes.values():
        ax.axhline(1.0, color="grey", linewidth=0.8)
    return _finish(fig, axes, kinds, "<strategy> / unified (>1: unified faster)", f"strategy / unified: {title}", path)


def _finish(fig, axes, kinds, ylabel: str, title: str, path: Path) -> Path:
    """What every panel figure shares: titled kinds over log query tokens, one legend, saved and closed."""
    for kind, ax in axes.items():
        ax.set_title(kind)
        ax.set_xlabel("query tokens")
        ax.set_xscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[kinds[0]].set_ylabel(ylabel)
    axes[kinds[-1]].legend(fontsize=7, loc="best")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
