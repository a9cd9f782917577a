"""What every attnbench figure says about itself, so a PNG read alone (in a PR, on a slide) needs no README.

A picture used to carry only the shape in its title; which GPU, library, dtype and mode made it,
what "reference" is, and whether a CPU ran it were nowhere on it. Kernel and e2e figures share
these pieces: a title of two lines at most from the rows (what and of what; device, GPU state,
dtype, context, mode; CPU runs marked) with the libraries and what the bars mean in a footnote,
line names that say what the oracle is, ticks at the swept values, log axes with three ticks or
more, markers kept inside their panel, a ratio axis with its line at 1 that does not zoom noise
into a trend, one legend for the whole figure, and an atomic save that replaces a symlink in the
way instead of following it. How each series looks (colour by strategy) is styles.py's.
"""

from __future__ import annotations

import io
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.ticker import (FixedLocator, FuncFormatter, LogLocator, MaxNLocator, NullFormatter,  # noqa: E402
                               NullLocator)

from attnbench.results.atomic import replace_atomic  # noqa: E402
from attnbench.results.tables import strategies_in  # noqa: E402

CPU_MARK = "CPU: pipeline demo, not a measurement"
RATIO_MARGIN = 0.05  # a ratio axis spans at least 1 ± 5 %: run-to-run noise must not fill the panel
PLAIN = FuncFormatter(lambda value, _: f"{value:g}")


def ratios_to_unified(df: pd.DataFrame, index: list[str], value: str) -> pd.DataFrame:
    """Long form: per `index`, each other strategy's `value` over unified's (columns index, strategy,
    ratio); empty when the rows have no unified or no other strategy."""
    table = df.pivot_table(index=index, columns="strategy", values=value, aggfunc="first")
    others = [s for s in strategies_in(table.columns) if s != "unified"]
    if "unified" not in table.columns or not others:
        return pd.DataFrame()
    return pd.concat([(table[s] / table["unified"]).dropna().reset_index(name="ratio").assign(strategy=s)
                      for s in others], ignore_index=True)


def oracle_backends() -> set[str]:
    """The backends that are the accuracy oracle (the float32 per-sequence softmax), by name."""
    from attnbench.kernels.backends.registry import REGISTRY

    return {name for name, backend in REGISTRY.items() if backend.oracle}


def backend_name(backend: str, oracles: set[str]) -> str:
    """A backend as a legend names it: the oracle says what it is ("reference (float32 oracle)")."""
    return f"{backend} (float32 oracle)" if backend in oracles else backend


class Palette:
    """One colour per name across every panel of a figure, for what is no strategy (a step kind)."""

    def __init__(self):
        self.colors: dict[str, str] = {}
        self.cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    def __call__(self, name: str) -> str:
        return self.colors.setdefault(name, self.cycle[len(self.colors) % len(self.cycle)])


def shape_text(heads, kv_heads, dim) -> str:
    """'32 heads / 8 kv heads, head dim 128' (the kv heads said only where they differ)."""
    return f"{heads} heads" + (f" / {kv_heads} kv heads" if kv_heads != heads else "") + f", head dim {dim}"


def line_label(*parts) -> str:
    return " ".join(str(p) for p in parts if p)


def _values(df: pd.DataFrame, column: str) -> list[str]:
    if column not in df:
        return []
    return sorted({str(v) for v in df[column].dropna() if str(v) not in ("", "nan")})


def is_cpu(df: pd.DataFrame) -> bool:
    return "device" in df and not df.empty and (df["device"].astype(str) == "cpu").all()


def where_it_ran(df: pd.DataFrame) -> str:
    """'NVIDIA H200; vllm-fa2: vllm.vllm_flash_attn 0.24.0' from the rows (each row records them)."""
    devices = ", ".join(_values(df, "gpu")) or "unknown device"
    if is_cpu(df):
        devices = "CPU"
    if {"library", "library_version"} <= set(df.columns):  # display-only columns: older files may lack them
        libraries = sorted({f"{b}: {lib} {v}" for b, lib, v in
                            df[["backend", "library", "library_version"]].dropna().astype(str).itertuples(index=False)})
    else:
        libraries = [f"{b}: library not recorded" for b in _values(df, "backend")]
    return f"{devices}; {', '.join(libraries)}"


def settings_text(df: pd.DataFrame, columns: list[tuple[str, str]]) -> str:
    """'bfloat16, context 1024, eager': each (column, prefix) with its values, where the rows have them."""
    parts = []
    for column, prefix in columns:
        values = _values(df, column)
        if values:
            parts.append(line_label(prefix, "/".join(values)))
    return ", ".join(parts)


@dataclass(frozen=True)
class Heading:
    """A figure's title, two lines at most (what was measured, of what; where and how), and the
    detail that would wrap a title into five lines (libraries, what the bars mean), for a footnote."""

    what: str
    where: list[str]
    detail: list[str] = field(default_factory=list)

    def lines(self, width: int) -> tuple[str, str]:
        """(title, footnote) for a figure `width` characters wide: each title line keeps its first
        part and as many of the rest as fit; what does not fit goes to the footnote."""
        kept, spilled = [], []
        for parts in ([self.what], self.where):
            line = parts[0] if parts else ""
            for part in parts[1:]:
                if len(line) + 2 + len(part) <= width:
                    line = f"{line}, {part}"
                else:
                    spilled.append(part)
            kept.append(line)
        note = "; ".join([*spilled, *self.detail])
        return "\n".join(filter(None, kept)), "\n".join(textwrap.wrap(note, int(width * 1.35)))


def title(what: str, df: pd.DataFrame, settings: str, note: str = "") -> Heading:
    """What is drawn (and of what: the shape, the trace, the model), then where it ran, in which GPU
    state and with which settings; for a CPU run, first on that line, that it is a demonstration of
    the pipeline. The libraries and `note` (what the bars or shades mean) go to the footnote."""
    devices = "CPU" if is_cpu(df) else ", ".join(_values(df, "gpu")) or "unknown device"
    where = [CPU_MARK if is_cpu(df) else devices, *(f"GPU state {s}" for s in _values(df, "gpu_state")),
             *filter(None, settings.split(", "))]
    libraries = where_it_ran(df).split("; ", 1)[1]
    return Heading(what, where, [libraries, *([note] if note else [])])


def panels(count: int, width: float = 4.6, height: float = 3.6, layout: str | None = "constrained"):
    """A figure of `count` panels, at most three a row; unused cells removed. Returns (fig, axes)."""
    cols = min(3, count)
    rows = -(-count // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows + 0.7), squeeze=False,
                             layout=layout)
    flat = list(axes.flat)
    for unused in flat[count:]:
        unused.remove()
    return fig, flat[:count]


def swept_x(ax, values, label: str, base: int = 10) -> None:
    """A log x axis ticked at exactly the swept values, written plainly (64, not 6.4×10^1)."""
    ticks = sorted({float(v) for v in values})
    ax.set_xscale("log", base=base)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(PLAIN)
    ax.xaxis.set_minor_locator(NullLocator())
    if len(ticks) > 6:
        ax.tick_params(axis="x", labelrotation=45)
    ax.set_xlabel(label)


def plain_log_x(ax) -> None:
    """A log x axis over what is drawn, ticks written as numbers (finish makes them at least three:
    a ratio or a TPOT often spans less than a decade, and would keep a single tick)."""
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(PLAIN)
    ax.xaxis.set_minor_formatter(NullFormatter())


def plain_log_y(ax, label: str) -> None:
    """A log y axis with ticks at 1, 2, 5 × 10^k written as numbers."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(PLAIN)
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel(label)


def ratio_y(ax, points, lows=(), highs=(), label: str = "") -> bool:
    """The ratio axis: a line at 1, and a range of at least 1 ± RATIO_MARGIN that holds every point
    and interval end; an interval reaching further than the points' range again runs off the
    panel (True is returned then, so the figure can say so)."""
    ax.axhline(1.0, color="black", linewidth=0.9, zorder=1)
    ax.set_ylabel(label)
    points = [p for p in points if pd.notna(p)]
    if not points:
        return False
    low, high = min(points), max(points)
    span = max(high - low, 2 * RATIO_MARGIN)
    ends = [v for v in (*lows, *highs) if pd.notna(v)]
    clipped = bool(ends) and (min(ends) < low - span or max(ends) > high + span)
    low = max(min([low, *ends]), low - span)
    high = min(max([high, *ends]), high + span)
    ax.set_ylim(min(low, 1 - RATIO_MARGIN) * 0.98, max(high, 1 + RATIO_MARGIN) * 1.02)
    return clipped


def _markers(ax) -> list[tuple[np.ndarray, float]]:
    """(points, radius in points) of every marker drawn: a line's (not an error bar's caps) and a scatter's."""
    found = [(line.get_xydata(), line.get_markersize() / 2 + line.get_markeredgewidth()) for line in ax.get_lines()
             if line.get_visible() and str(line.get_marker()) not in ("None", "", " ", "_", "|")]
    found += [(c.get_offsets(), 0.6 * float(np.sqrt(np.max(c.get_sizes())))) for c in ax.collections
              if isinstance(c, PathCollection) and len(c.get_offsets()) and len(c.get_sizes())]
    return [(np.asarray(xy, dtype=float).reshape(-1, 2), r) for xy, r in found]


def keep_markers_inside(ax) -> None:
    """Widen each axis (in its own scale, log or linear) so that every marker, of a line or a
    scatter, lies whole inside the panel: a point on the edge is drawn half. The room is the
    largest marker's radius (and a third more: the layout still shrinks the panel)."""
    markers = _markers(ax)
    if not markers:
        return
    xy = np.concatenate([p for p, _ in markers])
    radius = max(r for _, r in markers) + 2.0
    box = ax.get_position()
    for i, (axis, get, put, inches) in enumerate(((ax.xaxis, ax.get_xlim, ax.set_xlim, box.width * ax.figure.get_figwidth()),
                                                  (ax.yaxis, ax.get_ylim, ax.set_ylim, box.height * ax.figure.get_figheight()))):
        scale, limits = axis.get_transform(), get()
        values = scale.transform(xy[:, i][xy[:, i] > 0] if axis.get_scale() == "log" else xy[:, i])
        values = values[np.isfinite(values)]
        low, high = sorted(scale.transform(np.asarray(limits, dtype=float)))
        if not len(values) or not (np.isfinite(low) and np.isfinite(high)) or inches <= 0:
            continue
        pad = min(0.2, 1.33 * radius / (72 * inches))  # of the span
        span = (max(high, values.max()) - min(low, values.min())) / (1 - 2 * pad) or 1.0
        want = (min(low, values.min() - pad * span), max(high, values.max() + pad * span))
        if want != (low, high):
            new = scale.inverted().transform(np.asarray(want))
            put(*(new if limits[0] <= limits[1] else new[::-1]))


def enough_log_ticks(ax, least: int = 3) -> None:
    """A log axis ticked by a locator gets at least `least` labelled ticks in view: 1, 2, 5 x 10^k,
    denser where the range is short, plain numbers where even 1..9 x 10^k give too few. An axis
    ticked at the swept values (a FixedLocator) keeps exactly those."""
    for axis, get in ((ax.xaxis, ax.get_xlim), (ax.yaxis, ax.get_ylim)):
        if axis.get_scale() != "log" or isinstance(axis.get_major_locator(), FixedLocator):
            continue
        low, high = sorted(get())
        for locator in (LogLocator(base=10, subs=(1.0, 2.0, 5.0)), LogLocator(base=10, subs=(1, 1.5, 2, 3, 4, 5, 6, 8)),
                        LogLocator(base=10, subs=tuple(range(1, 10))), MaxNLocator(nbins=4, min_n_ticks=least)):
            axis.set_major_locator(locator)
            if sum(low <= t <= high for t in axis.get_ticklocs()) >= least:
                break
        axis.set_major_formatter(PLAIN)
        axis.set_minor_formatter(NullFormatter())


def _under_panels(fig, legend, band: float) -> None:
    """Room under the panels for the legend and, below it, the footnote's `band` (inches): the
    figure grows by them, its panels keeping their size (a constrained layout kept above them, a
    fixed one, the atlas's, moved up). Neither engine makes room for a figure legend by itself."""
    height = (legend.get_window_extent(fig.canvas.get_renderer()).height / fig.dpi + 0.08) if legend else 0.0
    old, params = fig.get_figheight(), fig.subplotpars
    top, bottom = (1 - params.top) * old, params.bottom * old
    fig.set_figheight(old + height + band)
    total = fig.get_figheight()
    if fig.get_layout_engine() is None:
        fig.subplots_adjust(top=1 - top / total, bottom=(bottom + height + band) / total)
    else:
        fig.get_layout_engine().set(rect=(0, (height + band) / total, 1, 1 - (height + band) / total))
    if legend:
        legend.set_bbox_to_anchor((0.5, (band + 0.02) / total), transform=fig.transFigure)


def finish(fig, axes, heading: Heading, path: Path, dpi: int = 90, markerscale: float = 1.0) -> Path:
    """Every panel's markers inside it and its log axes ticked; one legend for the figure naming
    every line (below the panels; `markerscale` shrinks large scatter markers there so its rows do
    not overlap); the two-line title and the footnote (heading.lines); an atomic save."""
    named: dict[str, object] = {}
    for ax in axes:
        ax.grid(True, which="major", alpha=0.3)
        keep_markers_inside(ax)
        enough_log_ticks(ax)
        for handle, text in zip(*ax.get_legend_handles_labels()):
            named.setdefault(text, handle)
    text, footnote = heading.lines(int(fig.get_figwidth() * 13))  # characters of a 10-point line that fit
    fig.suptitle(text, fontsize=10)
    # as many legend columns as the figure's width holds at the longest label (8 points: ~0.075 in a character)
    ncol = max(1, min(int(fig.get_figwidth() // (0.075 * max(map(len, named), default=1) + 0.6)), len(named)))
    band = ((footnote.count("\n") + 1) * 7 * 1.3 + 6) / 72 if footnote else 0.0  # inches under everything else
    legend = fig.legend(named.values(), named.keys(), loc="lower center", ncol=ncol, fontsize=8,
                        markerscale=markerscale) if named else None
    _under_panels(fig, legend, band)
    if footnote:
        fig.text(0.5, (band - 0.04) / fig.get_figheight(), footnote, ha="center", va="top", fontsize=7, color="dimgray")
    png = io.BytesIO()  # drawn in memory: the temporary file beside `path` lives only while the bytes are written
    try:
        fig.savefig(png, dpi=dpi, format="png")
    finally:
        plt.close(fig)
    replace_atomic(path, lambda tmp: tmp.write_bytes(png.getvalue()))
    return path
