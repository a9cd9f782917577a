"""The dashboard in a real browser: headless Chromium (Debian's package) driven by Playwright.

The site is built from the synthetic history of tests/history_fixtures.py and opened from file://.
Checked as a person would see it: the charts drawn at load are the charts in view, and scrolling
draws the others; every chart draws with no console error, a filter changes what is drawn, and the
planted step's commit carries the change-point marker in the drawn chart. Each check runs on the
page with the installed plotly's full bundle, and again with the partial bundle named by
ATTNBENCH_PLOTLY_JS (a plotly-basic.min.js; .ci/run fetches it with npm) when that is set. The
render time is printed (pytest -s), not asserted: timing belongs to benchmarks/dashboard_render.py.
Skips with a reason when Chromium or Playwright is missing (.ci/run installs both).
"""

from __future__ import annotations

import os
import shutil

import pytest

from bad_input_cli import invoke
from history_fixtures import DRAW_ALL, STEP_AT, commit_of, make_history

PARTIAL_BUNDLE = os.environ.get("ATTNBENCH_PLOTLY_JS")
CHROMIUM = os.environ.get("ATTNBENCH_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
pytest.importorskip("plotly", reason="the dashboard extra (plotly) is not installed")

DRAWN = """() => Array.from(document.querySelectorAll('.chart')).filter(d => !d.hidden).map(d => ({
    title: d.dataset.title, stale: d.dataset.stale, svg: d.querySelectorAll('.main-svg').length, lines: d.querySelectorAll('.scatterlayer .trace').length,
    data: (d.data || []).map(t => ({backend: t.meta.backend, role: t.meta.role || 'line', x: t.x}))}))"""
IN_VIEW = """() => Array.from(document.querySelectorAll('.chart')).filter(d => !d.hidden).map(d => {
    const r = d.getBoundingClientRect();
    return {title: d.dataset.title, drawn: d.dataset.stale === '0', inView: r.bottom > 0 && r.top < window.innerHeight};
})"""


@pytest.fixture(scope="module", params=["full", "partial"])
def page(request, tmp_path_factory):
    if request.param == "partial" and not PARTIAL_BUNDLE:
        pytest.skip("ATTNBENCH_PLOTLY_JS names no partial plotly.js bundle (.ci/run fetches plotly-basic.min.js)")
    root = tmp_path_factory.mktemp("browser")
    history = make_history(root)[0]
    bundle = ("--plotly-js", PARTIAL_BUNDLE) if request.param == "partial" else ()
    assert invoke("dashboard", history, "--out", root / "site", *bundle).exit_code == 0
    errors: list[str] = []
    with sync_api.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        tab = browser.new_page(viewport={"width": 1400, "height": 1000})
        tab.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        tab.goto((root / "site" / "index.html").as_uri())
        tab.wait_for_function("window.dashboardReady !== undefined", timeout=60_000)
        print(f"\ndashboard ({request.param} bundle) drawn {tab.evaluate('window.dashboardReady'):.0f} ms after "
              f"navigation (its script: {tab.evaluate('window.dashboardRenderMs'):.0f} ms)")
        at_load = {"charts": tab.evaluate(IN_VIEW), "drawn": tab.evaluate("window.dashboardDrawnAtLoad")}
        yield tab, errors, at_load
        browser.close()


def drawn(tab) -> list[dict]:
    tab.evaluate(DRAW_ALL)
    charts = tab.evaluate(DRAWN)
    assert [c["title"] for c in charts if c["stale"] != "0"] == [], "charts still blank after being scrolled to"
    return charts


def test_only_the_charts_in_view_draw_until_scrolled_to(page):
    tab, errors, at_load = page
    in_view = [c["title"] for c in at_load["charts"] if c["inView"]]
    assert [c["title"] for c in at_load["charts"] if c["drawn"]] == in_view
    assert 0 < len(in_view) == at_load["drawn"] < len(at_load["charts"])
    tab.set_viewport_size({"width": 1400, "height": 400})  # the last chart alone in view: the ones between stay unseen
    tab.evaluate("Array.from(document.querySelectorAll('.chart')).pop().scrollIntoView({block: 'start'})")
    tab.wait_for_function(f"({IN_VIEW})().every(c => c.drawn || !c.inView)", timeout=30_000)
    now = tab.evaluate(IN_VIEW)
    assert any(c["inView"] for c in now) and not set(c["title"] for c in now if c["inView"]) & set(in_view)
    never_seen = {c["title"] for c in at_load["charts"] if not c["inView"]} - {c["title"] for c in now if c["inView"]}
    assert never_seen and not any(c["drawn"] for c in now if c["title"] in never_seen)
    tab.set_viewport_size({"width": 1400, "height": 1000})
    tab.evaluate("window.scrollTo(0, 0)")
    assert errors == []


def test_every_chart_draws_without_a_console_error(page):
    tab, errors, _ = page
    charts = drawn(tab)
    assert len(charts) == 6  # a chart per batch kind and GPU
    for chart in charts:
        assert chart["svg"] >= 1 and chart["lines"] >= 8, chart["title"]  # 2 token counts x 2 backends x 2 strategies
    assert errors == []


def test_the_planted_step_carries_its_change_point_marker(page):
    tab, _, _ = page
    for chart in drawn(tab):
        markers = [t for t in chart["data"] if t["role"] == "change"]
        expected = [("vllm-fa2", [commit_of(STEP_AT)[:8]])] * 4 if "H200" in chart["title"] else []
        assert [(t["backend"], [x.split("<br>")[0] for x in t["x"]]) for t in markers] == expected, chart["title"]
    assert tab.locator(".scatterlayer .trace path.point").count() > 0


def test_filters_change_what_is_shown(page):
    tab, errors, _ = page
    tab.select_option("#filter-gpu", "NVIDIA H100")
    assert tab.inner_text("#shown") == "3 of 6 charts shown"
    assert all("H100" in c["title"] for c in drawn(tab))
    tab.select_option("#filter-backend", "vllm-fa3")
    charts = drawn(tab)
    assert charts and all({t["backend"] for t in c["data"]} == {"vllm-fa3"} for c in charts)
    kept = tab.evaluate("() => Array.from(document.querySelectorAll('tr[data-filtered]')).filter(r => !r.hidden)"
                        ".map(r => r.dataset.backend)")
    assert kept and set(kept) == {"vllm-fa3"}  # the tables' rows too (the change points were all vllm-fa2)
    tab.select_option("#filter-kind", "decode")
    assert tab.inner_text("#shown") == "1 of 6 charts shown"
    for name in ("gpu", "backend", "kind"):
        tab.select_option(f"#filter-{name}", "")
    assert tab.inner_text("#shown") == "6 of 6 charts shown" and errors == []
