"""A replay's pictures: per-step time over the trace, the CDF of per-step speedups, time by step kind.

Why these three: the totals hide where a choice loses (a few prefill steps can cost more than a
thousand decodes), the per-step series shows when in the trace, the CDF how often and by how
much, and the share by kind which steps the time goes to. One panel per mode; titles, one legend
and the save follow results/figures.py, so a PNG read alone says what ran it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from attnbench.results.figures import finish, panels, plain_log_x, plain_log_y, settings_text, title
from attnbench.results.replay import modes_of, oracle, per_step
from attnbench.results.styles import Styles, kind_colour
from attnbench.traces.steps import STEP_KINDS

SETTINGS = [("num_heads", "heads"), ("num_kv_heads", "kv heads"), ("head_dim", "head dim"), ("dtype", "")]


def _heading(what: str, rows: pd.DataFrame, modes: list[str], trace: str):
    """'<what>: <trace>' over '<GPU>, <mode>, 32 heads, 8 kv heads, ...': which trace, which shape."""
    named = f"{what}: {Path(trace).name}" if trace else what
    return title(named, rows, ", ".join(filter(None, ["/".join(modes), settings_text(rows, SETTINGS)])))


def _series(rows: pd.DataFrame, steps: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per mode: step x choice times, for the modes where some choice is complete."""
    found = {mode: per_step(rows, steps, mode) for mode in modes_of(rows)}
    return {mode: table for mode, table in found.items() if not table.empty}


def _figure(series: dict[str, pd.DataFrame], width: float, draw, what: str, rows: pd.DataFrame, path: Path,
            trace: str = "", style=None) -> Path | None:
    """One panel per mode, each drawn by draw(ax, mode, table, style); None when nothing is complete."""
    if not series:
        return None
    fig, axes = panels(len(series), width=width)
    style = style or Styles()
    for ax, (mode, table) in zip(axes, series.items()):
        draw(ax, mode, table, style)
    return finish(fig, axes, _heading(what, rows, list(series), trace), path)


def per_step_figure(rows: pd.DataFrame, steps: pd.DataFrame, path: Path, trace: str = "") -> Path | None:
    def draw(ax, mode, table, style) -> None:
        for choice in table.columns:
            ax.plot(table.index, table[choice], linewidth=0.8, **style.choice(choice, markevery=max(1, len(table) // 12)))
        ax.set_title(mode, fontsize=9)
        ax.set_xlabel("step of the trace")
        plain_log_y(ax, "attention time per layer (ms, the step's bucket)")
    return _figure(_series(rows, steps), 7.0, draw, "Per-step time over the trace", rows, path, trace)


def speedup_figure(rows: pd.DataFrame, steps: pd.DataFrame, path: Path, trace: str = "") -> Path | None:
    """CDF over steps of each choice's time over the best single choice's (above 1: slower)."""
    def draw(ax, mode, table, style) -> None:
        best = oracle(rows, steps, mode).best
        for choice in [c for c in table.columns if c != best]:
            ratio = np.sort((table[choice] / table[best]).to_numpy())
            ax.step(ratio, np.arange(1, len(ratio) + 1) / len(ratio), where="post",
                    **style.choice(choice, f"{choice} / {best}", markevery=max(1, len(ratio) // 8)))
        ax.axvline(1.0, color="black", linewidth=0.9)
        plain_log_x(ax)  # 0.5, 1, 2: the ratio's own numbers, not 5x10^-1
        ax.set_title(f"{mode}: against {best}", fontsize=9)
        ax.set_xlabel("per step: time of the choice / time of the best single choice")
        ax.set_ylabel("share of steps at or below")
    series = {m: t for m, t in _series(rows, steps).items() if len(t.columns) > 1}
    return _figure(series, 6.0, draw, "Per-step time over the best single choice, CDF", rows, path, trace)


def kind_share_figure(rows: pd.DataFrame, steps: pd.DataFrame, path: Path, trace: str = "") -> Path | None:
    """Per choice: its total split by step kind (stacked, ms; a colour per kind: the bars are choices)."""
    kinds = steps["kind"].to_numpy()

    def draw(ax, mode, table, _style) -> None:
        left = np.zeros(len(table.columns))
        for kind in STEP_KINDS:
            part = table[kinds == kind].sum().to_numpy()
            if part.any():
                ax.barh(list(table.columns), part, left=left, label=f"{kind} steps", color=kind_colour(kind))
                left += part
        ax.set_title(mode, fontsize=9)
        ax.set_xlabel("attention time per layer, summed over the trace (ms)")
    return _figure(_series(rows, steps), 6.0, draw, "Time by step kind", rows, path, trace)


def plot_replay(rows: pd.DataFrame, steps: pd.DataFrame, out_dir: Path, trace: str = "") -> list[Path]:
    """The three pictures; `trace` (the replayed file, env.json's replay.trace) names them."""
    made = [per_step_figure(rows, steps, out_dir / "replay_per_step.png", trace),
            speedup_figure(rows, steps, out_dir / "replay_speedup_cdf.png", trace),
            kind_share_figure(rows, steps, out_dir / "replay_kind_share.png", trace)]
    return [path for path in made if path is not None]
