"""The dashboard as one self-contained HTML page: Plotly's JS, the data and the page's own JS inline.

Why one file with everything inside: a browser refuses to fetch a file beside a page opened from
file://, and GitHub Pages serves what it is given; a page that carries its plotting library, its
data and its script opens in both, offline, with no server. The plotly.js inside is chosen by the
job (runs/dashboard.py: the full bundle, or a partial one) and named in the method note. Figures
are built with plotly's graph objects (checked against Plotly's schema here, not in the browser), one per chart; the
page's script (dashboard.js) only chooses which of their lines to show.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from importlib import resources

from attnbench.results.changepoints import MIN_SIZE
from attnbench.results.dashboard_data import FILTERS, Series, Settings, run_labels
from attnbench.results.dashboard_families import number
from attnbench.results.dashboard_tables import changes_table, latest_tables, runs_table, winner_tables
from attnbench.results.history import Entry

FILTER_NAMES = {"run_kind": "run", "kind": "batch"}
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
DASHES = ("solid", "dot", "dash", "dashdot", "longdash")
FONT = 'system-ui, "Segoe UI", Roboto, "DejaVu Sans", Arial, sans-serif'  # the page's own (dashboard.css)
WIDE = 20  # a chart whose values span more than this factor gets a log axis: every line stays readable


@dataclass(frozen=True)
class PlotlyBundle:
    name: str     # "full", or a partial bundle's name from its header ("basic - minified")
    version: str  # plotly.js's version
    text: str     # the script itself


def tick(run: str) -> str:
    """A run's label on the x axis: its commit over its time, so labels stay short and level."""
    commit, _, when = run.partition(" ")
    return f"{text(commit)}<br>{text(when)}"


def text(value: object) -> str:
    """A history's value as Plotly text: Plotly reads <b>, <br>, <a href> and entities in titles, hover
    texts, legend names and tick labels, so every character that could open markup is an entity."""
    return html.escape(str(value), quote=True)


# inside <script type="application/json"> the HTML parser still looks for `</script` and `<!--`:
# every character that could start markup is written as a JSON escape, and so are the two line
# separators that some JavaScript parsers took for line ends
JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def embedded_json(data: object) -> str:
    """`data` as JSON text that an HTML parser reads as nothing but text."""
    found = json.dumps(data, separators=(",", ":"))
    for character, escape in JSON_ESCAPES.items():
        found = found.replace(character, escape)
    return found


def meta(series: Series) -> dict:
    return {name: getattr(series, name) for name in FILTERS}


def line_traces(series: Series, style: dict) -> list:
    """The series' line with its interval as error bars, and its change points as markers."""
    import plotly.graph_objects as go

    x = [tick(r) for r in series.runs]
    unit = series.unit
    hover = [f"{text(series.label)}<br>{text(r)}<br>{number(v)} {unit} ({number(lo)}-{number(hi)}){' ' if n else ''}"
             f"{text(n)}" for r, v, lo, hi, n in zip(series.runs, series.value, series.low, series.high, series.notes)]
    traces = [go.Scatter(x=x, y=series.value, mode="lines+markers", name=text(series.label), meta=meta(series),
                         line={"color": style["color"], "dash": style["dash"]}, marker={"size": 6},
                         hovertext=hover, hoverinfo="text", cliponaxis=False,
                         error_y={"type": "data", "symmetric": False, "thickness": 1, "width": 0,
                                  "array": [h - v for h, v in zip(series.high, series.value)],
                                  "arrayminus": [v - lo for v, lo in zip(series.value, series.low)]})]
    if series.changes:
        said = [f"change point at {text(series.runs[c.index])}: {c.change:+.1%}<br>"
                f"median {number(c.before)} -> {number(c.after)} {unit}" for c in series.changes]
        traces.append(go.Scatter(x=[x[c.index] for c in series.changes],
                                 y=[series.value[c.index] for c in series.changes],
                                 mode="markers", name=f"change point ({text(series.label)})",
                                 meta={**meta(series), "role": "change"}, hovertext=said, hoverinfo="text",
                                 showlegend=False,  # the method note says what a red diamond is
                                 cliponaxis=False, marker={"symbol": "diamond-open", "size": 16, "line": {"width": 3},
                                                           "color": "#d62728"}))
    return traces


def styles(group: list[Series]) -> list[dict]:
    """A colour per choice (backend, strategy, mode) and a dash per what else tells its lines apart."""
    choices = list(dict.fromkeys((s.backend, s.strategy, s.mode) for s in group))
    rests = list(dict.fromkeys(s.label.partition(" · ")[2] for s in group))
    return [{"color": COLOURS[choices.index((s.backend, s.strategy, s.mode)) % len(COLOURS)],
             "dash": DASHES[rests.index(s.label.partition(" · ")[2]) % len(DASHES)]} for s in group]


def log_axis(low: float, high: float) -> dict:
    """A log axis ticked at 1, 2 and 5 times the powers of ten it spans, each named in full."""
    ticks = [m * 10.0 ** e for e in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
             for m in (1, 2, 5) if low / 1.5 <= m * 10.0 ** e <= high * 1.5]
    return {"type": "log", "tickvals": ticks, "ticktext": [number(v) for v in ticks]}


def figure(group: list[Series], runs: list[str]) -> dict:
    """One chart: its lines over the history's runs in order. The title is the page's (an <h3> above
    the chart, clear of Plotly's toolbar), not Plotly's."""
    import plotly.graph_objects as go

    traces = [t for s, style in zip(group, styles(group)) for t in line_traces(s, style)]
    present = {r for s in group for r in s.runs}
    values = [v for s in group for v in (*s.low, *s.high) if v > 0]
    wide = bool(values) and max(values) / min(values) > WIDE
    fig = go.Figure(traces)
    fig.update_layout(margin={"l": 60, "r": 16, "t": 30, "b": 40}, font={"family": FONT},
                      yaxis={"title": {"text": text(group[0].measure)}, "automargin": True,
                             **(log_axis(min(values), max(values)) if wide else {})},
                      xaxis={"type": "category", "categoryorder": "array", "automargin": True, "nticks": 8,
                             "tickfont": {"size": 10},
                             "categoryarray": [tick(r) for r in runs if r in present]},
                      legend={"orientation": "h", "y": -0.35, "yanchor": "top"}, hovermode="closest",
                      template="plotly_white")
    return json.loads(fig.to_json())


def charts(series: list[Series], runs: list[str]) -> list[dict]:
    groups: dict[str, list[Series]] = {}
    for s in sorted(series, key=lambda s: (s.gpu, s.run_kind, s.kind, s.shape, s.chart, s.label)):
        groups.setdefault(s.chart, []).append(s)
    return [{"title": title, "attributes": {name: sorted({getattr(s, name) for s in group}) for name in FILTERS},
             "changes": sorted({c for s in group for c in s.change_commits()}),
             "figure": figure(group, runs)} for title, group in groups.items()]


def filter_controls(series: list[Series]) -> str:
    parts = []
    for name in FILTERS:
        options = "".join(f'<option value="{html.escape(v)}">{html.escape(v)}</option>'
                          for v in sorted({getattr(s, name) for s in series}))
        parts.append(f'<label>{FILTER_NAMES.get(name, name)}<select id="filter-{name}"><option value="">all</option>'
                     f"{options}</select></label>")
    return "".join(parts) + '<span id="shown"></span>'


def method_note(settings: Settings, entries: list[Entry], bundle: PlotlyBundle) -> str:
    first, last = entries[0].date[:10], entries[-1].date[:10]
    return (f"{len(entries)} runs filed, {first} to {last}. The x axis is the runs in date order, each named by "
            "its commit and time (UTC). A kernel chart is one batch kind at one shape, a line per backend, strategy, "
            "mode and token count; an e2e chart one model and request size, a line per batch size; a replay is one "
            "chart of its choices (each choice's total over the trace), an atlas too (each choice's geometric "
            "mean over the cells every choice passed). Bars are the 95 % interval over replicate medians where the "
            "run has replicates, else p10-p90 (e2e: p50-p90). Change points (red diamonds, at the first run after "
            f"the change): PELT (ruptures) with the L1 cost on log times in units of the series' noise, penalty "
            f"{settings.penalty:g} &middot; ln(n), segments of at least {MIN_SIZE} runs, changes of at least "
            f"{settings.min_change:.1%} between the medians either side. Charts are drawn as they scroll into view, "
            f"with plotly.js v{html.escape(bundle.version)} ({html.escape(bundle.name)} bundle).")


def cards(drawn: list[dict]) -> str:
    """A box per chart: its title (set from the data by the page's script, as text) above the chart."""
    return "".join(f'<section class="card"><h3 class="chart-title" data-index="{i}"></h3><div class="chart" '
                   f'id="chart-{i}" data-index="{i}" data-title="{html.escape(c["title"])}"></div></section>'
                   for i, c in enumerate(drawn))


def page(series: list[Series], entries: list[Entry], settings: Settings, winners: list[tuple[Entry, object]],
         bundle: PlotlyBundle) -> str:
    """The whole site: index.html."""
    labels = run_labels(entries)
    drawn = charts(series, list(labels.values()))
    templates = [c["figure"]["layout"].pop("template", None) for c in drawn]  # one copy, not one per chart
    data = {"charts": drawn, "commits": list(dict.fromkeys(e.commit for e in entries)), "runs": list(labels.values()),
            "filters": list(FILTERS), "template": templates[0] if drawn else None,
            "settings": {"penalty": settings.penalty, "min_change": settings.min_change}}
    script = resources.files("attnbench.results").joinpath("dashboard.js").read_text(encoding="utf-8")
    style = resources.files("attnbench.results").joinpath("dashboard.css").read_text(encoding="utf-8")
    return "\n".join([
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>attnbench history</title>", f"<style>{style}</style>",
        f"<script>{bundle.text}</script>", "</head><body>",
        "<h1>attnbench history</h1>", f'<p class="method">{method_note(settings, entries, bundle)}</p>',
        f'<div id="filters">{filter_controls(series)}</div>',
        "<h2>Change points</h2>", changes_table(series),
        "<h2>Trends</h2>", f'<div id="charts">{cards(drawn)}</div>',
        "<h2>Latest runs</h2>", latest_tables(series, entries),
        winner_tables(winners),
        f"<h2>Runs filed</h2><details><summary>{len(entries)} runs, newest first</summary>",
        runs_table(entries, labels), "</details>",
        f'<script type="application/json" id="dashboard-data">{embedded_json(data)}</script>',
        f"<script>{script}</script>", "</body></html>", ""])
