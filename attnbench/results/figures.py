"""What every attnbench figure says about itself, so a PNG read alone (in a PR, on a slide) needs no README.

A picture used to carry only the shape in its title; which GPU, library, dtype and mode made it,
what "reference" is, and whether a CPU ran it were nowhere on it. Kernel and e2e figures share
these pieces: a title from the rows (device, library versions, dtype, context, mode; CPU runs
marked), line names that say what the oracle is, ticks at the swept values, a ratio axis with its
line at 1 that does not zoom noise into a trend, one legend for the whole figure, and an atomic
save that replaces a symlink in the way instead of following it.
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator  # noqa: E402

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
    """One colour per line name across every panel of a figure, so one legend can name them all."""

    def __init__(self):
        self.colors: dict[str, str] = {}
        self.cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    def __call__(self, name: str) -> str:
        return self.colors.setdefault(name, self.cycle[len(self.colors) % len(self.cycle)])


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


def title(what: str, df: pd.DataFrame, settings: str, note: str = "") -> str:
    """What is drawn with its settings, where it ran with which libraries, a note on the bars, and,
    for a CPU run, first, that it is a demonstration of the pipeline."""
    lines = [f"{what}: {settings}" if settings else what, where_it_ran(df), *([note] if note else [])]
    if is_cpu(df):
        lines.insert(0, CPU_MARK)
    return "\n".join(lines)


def panels(count: int, width: float = 4.6, height: float = 3.6, layout: str | None = "constrained"):
    """A figure of `count` panels, at most three a row; unused cells removed. Returns (fig, axes)."""
    cols = min(3, count)
    rows = -(-count // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows + 1.2), squeeze=False,
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
    """A log x axis over what is drawn, ticks written as numbers: 1, 2, 5 x 10^k over a decade or
    more, denser under one (a ratio or a TPOT often spans less, and would keep a single tick)."""
    ax.set_xscale("log")
    low, high = ax.get_xlim()
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if high > 10 * low else (1, 1.5, 2, 3, 4, 5, 6, 8)))
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


def finish(fig, axes, heading: str, path: Path, dpi: int = 90, markerscale: float = 1.0) -> Path:
    """One legend for the figure naming every line (below the panels; `markerscale` shrinks large
    scatter markers there so its rows do not overlap), the title, an atomic save."""
    named: dict[str, object] = {}
    for ax in axes:
        ax.grid(True, which="major", alpha=0.3)
        for handle, text in zip(*ax.get_legend_handles_labels()):
            named.setdefault(text, handle)
    width = int(fig.get_figwidth() * 13)  # characters of a 10-point title line that fit the figure
    fig.suptitle("\n".join(textwrap.fill(line, width) for line in heading.split("\n")), fontsize=10)
    if named:
        # as many columns as the figure's width holds at the longest label (8 points: ~0.075 in a character)
        fits = int(fig.get_figwidth() // (0.075 * max(map(len, named)) + 0.6))
        fig.legend(named.values(), named.keys(), loc="outside lower center", ncol=max(1, min(fits, len(named))),
                   fontsize=8, markerscale=markerscale)
    png = io.BytesIO()  # drawn in memory: the temporary file beside `path` lives only while the bytes are written
    try:
        fig.savefig(png, dpi=dpi, format="png")
    finally:
        plt.close(fig)
    replace_atomic(path, lambda tmp: tmp.write_bytes(png.getvalue()))
    return path
