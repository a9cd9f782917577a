"""Every picture attnbench draws, read from matplotlib's Figure objects (not pixels) for what issue 40 asks.

One colour per strategy across every plot (kernel, e2e, e2e --trace, replay, atlas, rule); titles of
two lines at most that name what was measured; an x label on every panel; no marker cut by its
panel's edge; log axes with three tick labels or more; overlaid runs that do not hide one another;
atlas maps whose cells fill their panels with text sized from the cell; a zero bar that shows.
Each figure is drawn from small data: the session's CPU kernel and e2e runs, the shipped H200
replay, and synthetic e2e --trace, atlas and rule tables built here.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from types import SimpleNamespace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex
from matplotlib.image import AxesImage
from matplotlib.ticker import FixedLocator

from attnbench.kernels.atlas_axes import NAMES
from attnbench.kernels.workload import STRATEGIES
from attnbench.results import export
from attnbench.results import files as report

pytest_plugins = ["results_fixtures"]

ROOT = Path(__file__).resolve().parent.parent
REPLAY = ROOT / "results" / "examples" / "h200-replay-chat-high"
H200 = {"device": "cuda:0", "gpu": "NVIDIA H200", "library": "vllm", "library_version": "0.24.0"}
CHOICES = ["vllm-fa3 unified", "vllm-fa3 split", "flashinfer split", "flashinfer unified"]


@pytest.fixture
def kept(monkeypatch):
    """The figures drawn while the test runs, kept open (figures.finish closes each after saving)."""
    figs = []
    close = plt.close
    monkeypatch.setattr(plt, "close", figs.append)
    yield figs
    close("all")


def trace_tables() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(trace.csv rows, requests.csv rows, results.csv rows) of a served trace, split listed first
    (a plot that colours in the order it meets its lines gives split unified's colour), its TPOTs
    within one decade and its metrics within a few ms (a log axis there had two ticks)."""
    about = {**H200, "trace": "scenarios/traces/chat-high.jsonl", "model": "llama-3-8b", "params_b": 8.03,
             "dtype": "bfloat16", "mode": "graph", "arrivals": "trace", "max_num_seqs": 24, "chunk_size": 2048,
             "requests": 24}
    pairs = [("vllm-fa3", "split"), ("vllm-fa3", "unified"), ("flashinfer", "split"), ("flashinfer", "unified")]
    rows = pd.DataFrame([{**about, "backend": b, "strategy": s} for b, s in pairs])
    rng = np.random.default_rng(0)
    requests = pd.DataFrame([{"backend": b, "strategy": s, "mode": "graph", "ttft_ms": t, "tpot_ms": 6 + t / 60}
                             for b, s in pairs for t in rng.uniform(12, 200, 24)])
    metrics = pd.DataFrame([{**about, "backend": b, "strategy": s, "metric": m, "verdict": "pass", "serves": 3,
                             "serve_median_ms": 7.0 + i, "serve_min_ms": 6.8 + i, "serve_max_ms": 7.3 + i}
                            for i, (b, s) in enumerate(pairs)
                            for m in ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "itl_p50", "e2el_p50")])
    return rows, requests, metrics


def atlas_cells(winners: bool = True) -> pd.DataFrame:
    """A 6 x 7 map in two panels (prefill_context 0 and 862), four choices winning by turns."""
    rng = np.random.default_rng(1)
    cells = []
    for pc, share, context in itertools.product([0, 862], [0, 0.12, 0.25, 0.5, 0.75, 1],
                                                [512, 912, 1625, 2896, 5161, 9196, 16384]):
        times = {c: float(rng.uniform(0.05, 3)) for c in CHOICES}
        ranked = sorted(times, key=times.get)
        cells.append({**{n: 0 for n in NAMES}, "prefill_context": pc, "decode_share": share,
                      "decode_context": context, "tokens": 32, "winner": ranked[0] if winners else None,
                      "tie": (share == 0.25) if winners else None, "margin": times[ranked[1]] / times[ranked[0]],
                      **{f"{c} ms": t for c, t in times.items()}})
    return pd.DataFrame(cells)


def rule_lines():
    from attnbench.results.rule_report import Line

    return {"all cells": [Line("per-cell oracle", "per cell", 10.0, 0.0), Line("rule [per cell]", "per cell", 10.0, 0.0),
                          Line("best single choice", "vllm-fa3 split", 11.0, 10.0),
                          Line("always", "vllm-fa3 unified", 12.5, 25.0), Line("always", "vllm-fa3 split", 11.0, 10.0)]}


@pytest.fixture(scope="module")
def figures(cpu_run, e2e_run, tmp_path_factory) -> dict[str, list]:
    """Every plot function's figures, by the picture they make: drawn once for the module's tests."""
    tmp_path, kept = tmp_path_factory.mktemp("pictures"), []
    close = plt.close
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plt, "close", kept.append)
        drawn = _draw_every_picture(cpu_run, e2e_run, kept, tmp_path)
    yield drawn
    close("all")


def _draw_every_picture(cpu_run, e2e_run, kept, tmp_path) -> dict[str, list]:
    from attnbench.results import atlas_plots
    from attnbench.results.e2e_trace_plot import plot_metrics, plot_trace
    from attnbench.results.read import E2E
    from attnbench.results.replay import read_steps
    from attnbench.results.replay_plots import plot_replay
    from attnbench.results.rule_plot import plot_rule

    rows, requests, metrics = trace_tables()
    drawn: dict[str, list] = {}

    def draw(name, make):
        before = len(kept)
        make()
        drawn[name] = kept[before:]

    draw("kernel", lambda: export.plot_results([("", report.load_results(cpu_run))], tmp_path / "k"))
    draw("e2e", lambda: export.plot_results([("", report.load_results(e2e_run / "results.csv"))], tmp_path / "e", E2E))
    draw("trace", lambda: (plot_trace(rows, requests, tmp_path / "t.png"), plot_metrics(metrics, tmp_path / "m.png")))
    replay_rows = pd.read_csv(REPLAY / "results.csv")
    draw("replay", lambda: plot_replay(replay_rows, read_steps(REPLAY), tmp_path, "scenarios/traces/chat-high.jsonl"))
    about = pd.DataFrame([{**H200, "backend": "vllm-fa3", "mode": "graph", "dtype": "bfloat16", "num_heads": 32}])
    cells = atlas_cells()
    crossovers = pd.DataFrame(columns=["axis", "status", "low", "high", *NAMES])
    draw("atlas", lambda: (atlas_plots.map_figure(cells, "decode_share", "decode_context", ["prefill_context"], about,
                                                  tmp_path / "map.png"),
                           atlas_plots.margin_figure(cells, crossovers, ["decode_share", "decode_context"], about,
                                                     tmp_path / "margins.png")))
    draw("rule", lambda: plot_rule(SimpleNamespace(about=about, shapes=[(32, 8, 128)]), rule_lines(), tmp_path / "rule.png"))
    assert all(drawn.values()), {k: len(v) for k, v in drawn.items()}
    for fig in kept:
        fig.canvas.draw()  # laid out as saved, for the tests that read positions
    return drawn


def series(ax) -> list[tuple[str, object]]:
    """(name, the line of its points) of every named series: an error bar's name is its container's."""
    found = [(c.get_label(), c.lines[0]) for c in ax.containers if hasattr(c, "has_yerr") and c.lines[0] is not None]
    taken = {id(line) for _, line in found}
    return found + [(l.get_label(), l) for l in ax.get_lines()
                    if id(l) not in taken and not l.get_label().startswith("_")]


def strategy_of(label: str) -> str | None:
    """The strategy a series stands for: the first strategy its name holds ("split / unified": split)."""
    return next((w for w in re.split(r"[ /:()]+", label) if w in STRATEGIES), None)


def strategy_colours(fig) -> set[tuple[str, str]]:
    """(strategy, colour) of every named line, every rule bar of one choice, every atlas key at full margin."""
    found = set()
    for ax in fig.axes:
        for label, line in series(ax):
            if strategy_of(label):
                found.add((strategy_of(label), to_hex(line.get_color())))
        for patch in ax.patches:
            if "1.5x or more" in str(patch.get_label()):
                found.add((strategy_of(patch.get_label()), to_hex(patch.get_facecolor())))
        names = [t.get_text() for t in ax.get_yticklabels()]
        bars = [p for p in ax.containers if hasattr(p, "patches")]
        for bar, name in zip(bars[0].patches if bars else [], names):
            if name.startswith("always"):
                found.add((strategy_of(name), to_hex(bar.get_facecolor())))
    return found


def test_a_strategy_has_one_colour_in_every_plot(figures):
    by_plot = {name: set().union(*map(strategy_colours, figs)) for name, figs in figures.items()}
    assert all({s for s, _ in found} >= {"unified", "split"} for found in by_plot.values()), by_plot
    seen: dict[str, set[str]] = {}
    for found in by_plot.values():
        for strategy, colour in found:
            seen.setdefault(strategy, set()).add(colour)
    assert all(len(colours) == 1 for colours in seen.values()), seen
    assert len({next(iter(c)) for c in seen.values()}) == len(seen)  # and no two strategies share one


SUBJECT = {"kernel": "4 heads / 2 kv heads, head dim 32", "e2e": "tiny", "trace": "chat-high.jsonl",
           "replay": "chat-high.jsonl", "atlas": "heads 32", "rule": "32 heads / 8 kv heads, head dim 128"}


def test_titles_have_two_lines_at_most_and_name_what_where_and_how(figures):
    for name, figs in figures.items():
        for fig in figs:
            title = fig._suptitle.get_text()
            assert len(title.splitlines()) <= 2, (name, title)
            assert SUBJECT[name] in title, (name, title)
            assert ("CPU" if name in ("kernel", "e2e") else "NVIDIA H200") in title, (name, title)
            assert name in ("atlas", "rule") or re.search(r"\b(eager|graph)\b", title), (name, title)


def test_every_panel_has_an_x_label(figures):
    missing = [(name, ax.get_title()) for name, figs in figures.items() for fig in figs for ax in fig.axes
               if not ax.get_xlabel()]
    assert not missing


def test_no_marker_is_cut_by_its_panel_edge(figures):
    """Drawn, each marker's centre lies at least its radius inside its panel."""
    cut = []
    for name, figs in figures.items():
        for fig in figs:
            for ax in fig.axes:
                box = ax.get_window_extent()
                for line in ax.get_lines():
                    if str(line.get_marker()) in ("None", "", " ", "_", "|") or not len(line.get_xydata()):
                        continue
                    radius = line.get_markersize() / 2 * fig.dpi / 72
                    xy = ax.transData.transform(line.get_xydata())
                    xy = xy[np.isfinite(xy).all(axis=1)]
                    inside = ((xy[:, 0] >= box.x0 + radius - 0.5) & (xy[:, 0] <= box.x1 - radius + 0.5)
                              & (xy[:, 1] >= box.y0 + radius - 0.5) & (xy[:, 1] <= box.y1 - radius + 0.5))
                    if not inside.all():
                        cut.append((name, ax.get_title(), line.get_label()))
    assert not cut


def test_log_axes_have_three_tick_labels_or_more(figures):
    few = []
    for name, figs in figures.items():
        for fig in figs:
            for ax in fig.axes:
                for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
                    if axis.get_scale() != "log" or isinstance(axis.get_major_locator(), FixedLocator):
                        continue  # an axis ticked at exactly the swept values keeps those
                    low, high = sorted(limits)
                    shown = [t for t in axis.get_major_ticks() if low <= t.get_loc() <= high and t.label1.get_text()]
                    if len(shown) < 3:
                        few.append((name, ax.get_title(), [t.label1.get_text() for t in shown]))
    assert not few


def test_overlaid_runs_show_every_series(cpu_run, kept, tmp_path):
    """The same run twice, overlaid: every line has a twin with the same points, drawn so that
    both show (hollow and larger on top), not the same marker again under a second colour."""
    df = report.load_results(cpu_run)
    export.plot_results([("a", df), ("b", df)], tmp_path)
    assert kept
    for fig in kept:
        for ax in fig.axes:
            twins: dict[bytes, list] = {}
            for _, line in series(ax):
                twins.setdefault(line.get_xydata().tobytes(), []).append(line)
            assert twins and all(len(g) == 2 for g in twins.values())
            for a, b in twins.values():
                looks = [(l.get_marker(), l.get_fillstyle(), l.get_markersize()) for l in (a, b)]
                assert looks[0] != looks[1] and {a.get_markersize(), b.get_markersize()} != {a.get_markersize()}
                assert to_hex(a.get_color()) == to_hex(b.get_color())  # the same strategy: the same colour


def test_a_zero_regret_bar_is_marked_and_labelled(figures):
    (fig,) = figures["rule"]
    ax = fig.axes[0]
    names = [t.get_text() for t in ax.get_yticklabels()]
    zero = names.index("rule [per cell]")
    dots = [l for l in ax.get_lines() if list(l.get_xydata()[:, 0]) == [0.0] and l.get_xydata()[0, 1] == zero]
    assert dots and str(dots[0].get_marker()) not in ("None", "")
    assert "0.0 %" in [t.get_text() for t in ax.texts]
    assert ax.get_xlim()[0] < 0  # the dot on 0 is whole, not half


def test_atlas_maps_fill_their_panels_and_size_text_from_the_cells(kept, tmp_path):
    """Cells are a grid as large as the panel (no empty canvas), numbers sized from the cell (a
    cell of half an inch: 6 points or more), and with no winner (a CPU run) colours that still
    tell the times apart."""
    from attnbench.results import atlas_plots

    about = pd.DataFrame([{"device": "cpu", "backend": "reference", "library": "torch", "library_version": "2",
                           "mode": "eager", "dtype": "bfloat16"}])
    for winners in (True, False):
        atlas_plots.map_figure(atlas_cells(winners), "decode_share", "decode_context", ["prefill_context"], about,
                               tmp_path / f"map{winners}.png")
    for fig in kept:
        for ax in fig.axes:
            (image,) = [a for a in ax.get_children() if isinstance(a, AxesImage)]
            left, right, bottom, top = image.get_extent()
            assert (left, right) == pytest.approx(sorted(ax.get_xlim())) and (bottom, top) == pytest.approx(sorted(ax.get_ylim()))
            assert ax.texts and min(t.get_fontsize() for t in ax.texts) >= 6
            colours = {tuple(c) for c in image.get_array().reshape(-1, 3)}
            assert len(colours) >= 8, len(colours)
    assert kept[1]._suptitle.get_text().startswith("Best time by")  # no winner: the map says what it colours


def test_plot_of_a_replay_names_its_trace(kept, tmp_path, cli):
    assert cli("plot", REPLAY, "--out", tmp_path / "p").exit_code == 0
    assert kept and all("chat-high.jsonl" in fig._suptitle.get_text() for fig in kept)
