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

from attnbench.results.figures import Palette, finish, panels, plain_log_x, plain_log_y, settings_text, title
from attnbench.results.replay import modes_of, oracle, per_step
from attnbench.traces.steps import STEP_KINDS

SETTINGS = [("dtype", ""), ("num_heads", "heads"), ("num_kv_heads", "kv heads"), ("head_dim", "head dim")]


def _heading(what: str, rows: pd.DataFrame, modes: list[str]) -> str:
    return title(what, rows, ", ".join(filter(None, [settings_text(rows, SETTINGS), "/".join(modes)])))


def _series(rows: pd.DataFrame, steps: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per mode: step x choice times, for the modes where some choice is complete."""
    found = {mode: per_step(rows, steps, mode) for mode in modes_of(rows)}
    return {mode: table for mode, table in found.items() if not table.empty}


def _figure(series: dict[str, pd.DataFrame], width: float, draw, what: str, rows: pd.DataFrame,
            path: Path) -> Path | None:
    """One panel per mode, each drawn by draw(ax, mode, table, color); None when nothing is complete."""
    if not series:
        return None
    fig, axes = panels(len(series), width=width)
    color = Palette()
    for ax, (mode, table) in zip(axes, series.items()):
        draw(ax, mode, table, color)
    return finish(fig, axes, _heading(what, rows, list(series)), path)


def per_step_figure(rows: pd.DataFrame, steps: pd.DataFrame, path: Path) -> Path | None:
    def draw(ax, mode, table, color) -> None:
        for choice in table.columns:
            ax.plot(table.index, table[choice], linewidth=0.8, label=choice, color=color(choice))
        ax.set_title(mode, fontsize=9)
        ax.set_xlabel("step of the trace")
        plain_log_y(ax, "attention time per layer (ms, the step's bucket)")
    return _figure(_series(rows, steps), 7.0, draw, "Per-step time over the trace", rows, path)


def speedup_figure(rows: pd.DataFrame, steps: pd.DataFrame, path: Path) -> Path | None:
    """CDF over steps of each choice's time over the best single choice's (above 1: slower)."""
    def draw(ax, mode, table, color) -> None:
        best = oracle(rows, steps, mode).best
        for choice in [c for c in table.columns if c != best]:
            ratio = np.sort((table[choice] / table[best]).to_numpy())
            ax.step(ratio, np.arange(1, len(ratio) + 1) / len(ratio), where="post", label=f"{choice} / {best}",
                    color=color(choice))
        ax.axvline(1.0, color="black", linewidth=0.9)
        plain_log_x(ax)  # 0.5, 1, 2: the ratio's own numbers, not 5x10^-1
        ax.set_title(f"{mode}: against {best}, the best single choice", fontsize=9)
        ax.set_xlabel("time of the choice / time of the best single choice, per step (x)")
        ax.set_ylabel("share of steps at or below")
    series = {m: t for m, t in _series(rows, steps).items() if len(t.columns) > 1}
    return _figure(series, 6.0, draw, "CDF of the per-step time ratio", rows, path)


def kind_share_figure(rows: pd.DataFrame, steps: pd.DataFrame, path: Path) -> Path | None:
    """Per choice: its total split by step kind (stacked, ms)."""
    kinds = steps["kind"].to_numpy()

    def draw(ax, mode, table, color) -> None:
        left = np.zeros(len(table.columns))
        for kind in STEP_KINDS:
            part = table[kinds == kind].sum().to_numpy()
            if part.any():
                ax.barh(list(table.columns), part, left=left, label=f"{kind} steps", color=color(kind))
                left += part
        ax.set_title(mode, fontsize=9)
        ax.set_xlabel("attention time per layer, summed over the trace (ms)")
    return _figure(_series(rows, steps), 6.0, draw, "Time by step kind", rows, path)


def plot_replay(rows: pd.DataFrame, steps: pd.DataFrame, out_dir: Path) -> list[Path]:
    made = [per_step_figure(rows, steps, out_dir / "replay_per_step.png"),
            speedup_figure(rows, steps, out_dir / "replay_speedup_cdf.png"),
            kind_share_figure(rows, steps, out_dir / "replay_kind_share.png")]
    return [path for path in made if path is not None]
