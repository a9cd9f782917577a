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
from dataclasses import dataclass
from importlib import resources

from attnbench.results.changepoints import MIN_SIZE
from attnbench.results.dashboard_data import Series, Settings
from attnbench.results.dashboard_tables import changes_table, latest_tables, winner_tables
from attnbench.results.history import Entry

FILTERS = ("gpu", "backend", "strategy", "kind", "shape")
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")


@dataclass(frozen=True)
class PlotlyBundle:
    name: str     # "full", or a partial bundle's name from its header ("basic - minified")
    version: str  # plotly.js's version
    text: str     # the script itself


def short(commit: str) -> str:
    return commit[:8]


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


def line_traces(series: Series, colour: str) -> list:
    """The series' line with its interval as error bars, and its change points as markers."""
    import plotly.graph_objects as go

    x = [text(short(c)) for c in series.commits]
    unit = series.unit
    hover = [f"{text(series.label)}<br>{text(c)} {text(d[:10])}<br>{v:.4g} {unit} ({lo:.4g}-{hi:.4g})"
             for c, d, v, lo, hi in zip(series.commits, series.dates, series.value, series.low, series.high)]
    traces = [go.Scatter(x=x, y=series.value, mode="lines+markers", name=text(series.label), meta=meta(series),
                         line={"color": colour}, marker={"size": 5}, hovertext=hover, hoverinfo="text",
                         error_y={"type": "data", "symmetric": False, "thickness": 1, "width": 0,
                                  "array": [h - v for h, v in zip(series.high, series.value)],
                                  "arrayminus": [v - lo for v, lo in zip(series.value, series.low)]})]
    if series.changes:
        said = [f"change point at {text(short(series.commits[c.index]))}: {c.change:+.1%}<br>"
                f"median {c.before:.4g} -> {c.after:.4g} {unit}" for c in series.changes]
        traces.append(go.Scatter(x=[x[c.index] for c in series.changes], y=[series.value[c.index] for c in series.changes],
                                 mode="markers", name=f"change point ({text(series.label)})",
                                 meta={**meta(series), "role": "change"}, hovertext=said, hoverinfo="text",
                                 marker={"symbol": "diamond-open", "size": 16, "line": {"width": 3},
                                         "color": "#d62728"}))
    return traces


def figure(title: str, group: list[Series], commits: list[str]) -> dict:
    """One chart: the lines of one point on one GPU, over the history's commits in order."""
    import plotly.graph_objects as go

    traces = [t for i, s in enumerate(group) for t in line_traces(s, COLOURS[i % len(COLOURS)])]
    present = {c for s in group for c in s.commits}
    fig = go.Figure(traces)
    fig.update_layout(title={"text": text(title), "font": {"size": 13}}, margin={"l": 60, "r": 10, "t": 40, "b": 40},
                      yaxis={"title": {"text": f"{group[0].unit} ({group[0].interval})"}, "automargin": True},
                      xaxis={"type": "category", "categoryorder": "array",
                             "categoryarray": [text(short(c)) for c in commits if c in present], "automargin": True},
                      legend={"orientation": "h", "y": -0.3, "yanchor": "top"}, hovermode="closest", template="plotly_white")
    return json.loads(fig.to_json())


def charts(series: list[Series], commits: list[str]) -> list[dict]:
    groups: dict[str, list[Series]] = {}
    for s in sorted(series, key=lambda s: (s.gpu, s.run_kind, s.kind, s.shape, s.chart, s.label)):
        groups.setdefault(s.chart, []).append(s)
    return [{"title": title, "attributes": {name: sorted({getattr(s, name) for s in group}) for name in FILTERS},
             "changes": sorted({c for s in group for c in s.change_commits()}),
             "figure": figure(title, group, commits)} for title, group in groups.items()]


def filter_controls(series: list[Series]) -> str:
    parts = []
    for name in FILTERS:
        options = "".join(f'<option value="{html.escape(v)}">{html.escape(v)}</option>'
                          for v in sorted({getattr(s, name) for s in series}))
        parts.append(f'<label>{name}<select id="filter-{name}"><option value="">all</option>{options}</select></label>')
    return "".join(parts) + '<span id="shown"></span>'


def method_note(settings: Settings, entries: list[Entry], bundle: PlotlyBundle) -> str:
    first, last = entries[0].date[:10], entries[-1].date[:10]
    return (f"{len(entries)} runs filed, {first} to {last}. Each line is one row (backend, strategy) of one "
            "point on one GPU over the commits in date order; bars are the row's 95 % interval over replicate "
            "medians where the run has replicates, else its p10-p90 (e2e: p50-p90). Change points (red diamonds, "
            f"at the first run after the change): PELT (ruptures) with the L1 cost on log times in units of "
            f"the series' noise, penalty {settings.penalty:g} &middot; ln(n), segments of at least {MIN_SIZE} "
            f"runs, changes of at least {settings.min_change:.1%} between the medians either side. Charts are "
            f"drawn as they scroll into view, with plotly.js v{html.escape(bundle.version)} ({html.escape(bundle.name)} "
            "bundle).")


def page(series: list[Series], entries: list[Entry], settings: Settings, winners: list[tuple[Entry, object]],
         bundle: PlotlyBundle) -> str:
    """The whole site: index.html."""
    commits = list(dict.fromkeys(e.commit for e in entries))
    drawn = charts(series, commits)
    templates = [c["figure"]["layout"].pop("template", None) for c in drawn]  # one copy, not one per chart
    data = {"charts": drawn, "commits": commits, "filters": list(FILTERS), "template": templates[0] if drawn else None,
            "settings": {"penalty": settings.penalty, "min_change": settings.min_change}}
    divs = "".join(f'<div class="chart" id="chart-{i}" data-index="{i}" data-title="{html.escape(c["title"])}"></div>'
                   for i, c in enumerate(drawn))
    script = resources.files("attnbench.results").joinpath("dashboard.js").read_text(encoding="utf-8")
    style = resources.files("attnbench.results").joinpath("dashboard.css").read_text(encoding="utf-8")
    payload = embedded_json(data)
    return "\n".join([
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>attnbench history</title>", f"<style>{style}</style>",
        f"<script>{bundle.text}</script>", "</head><body>",
        "<h1>attnbench history</h1>", f'<p class="method">{method_note(settings, entries, bundle)}</p>',
        f'<div id="filters">{filter_controls(series)}</div>',
        "<h2>Change points</h2>", changes_table(series),
        "<h2>Trends</h2>", f'<div id="charts">{divs}</div>',
        "<h2>Latest runs</h2>", latest_tables(series, entries),
        winner_tables(winners),
        f'<script type="application/json" id="dashboard-data">{payload}</script>',
        f"<script>{script}</script>", "</body></html>", ""])
