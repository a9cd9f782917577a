"""The dashboard in a real browser: headless Chromium (Debian's package) driven by Playwright.

The site is built from the synthetic history of tests/history_fixtures.py and opened from file://.
Checked as a person would see it: every chart draws with no console error, a filter changes what
is drawn, and the planted step's commit carries the change-point marker in the drawn chart. The
render time is printed (pytest -s), not asserted: timing belongs to benchmarks/dashboard_render.py.
Skips with a reason when Chromium or Playwright is missing (.ci/run installs both).
"""

from __future__ import annotations

import os
import shutil

import pytest

from bad_input_cli import invoke
from history_fixtures import DRAW_ALL, STEP_AT, commit_of, make_history

CHROMIUM = os.environ.get("ATTNBENCH_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
pytest.importorskip("plotly", reason="the dashboard extra (plotly) is not installed")

DRAWN = """() => Array.from(document.querySelectorAll('.chart')).filter(d => !d.hidden).map(d => ({
    title: d.dataset.title, stale: d.dataset.stale, svg: d.querySelectorAll('.main-svg').length, lines: d.querySelectorAll('.scatterlayer .trace').length,
    data: (d.data || []).map(t => ({backend: t.meta.backend, role: t.meta.role || 'line', x: t.x}))}))"""


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    history = make_history(root)[0]
    assert invoke("dashboard", history, "--out", root / "site").exit_code == 0
    errors: list[str] = []
    with sync_api.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        tab = browser.new_page(viewport={"width": 1400, "height": 1000})
        tab.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        tab.goto((root / "site" / "index.html").as_uri())
        tab.wait_for_function("window.dashboardReady !== undefined", timeout=60_000)
        print(f"\ndashboard drawn {tab.evaluate('window.dashboardReady'):.0f} ms after navigation "
              f"(its script: {tab.evaluate('window.dashboardRenderMs'):.0f} ms)")
        yield tab, errors
        browser.close()


def drawn(tab) -> list[dict]:
    tab.evaluate(DRAW_ALL)
    charts = tab.evaluate(DRAWN)
    assert all(c["stale"] == "0" for c in charts)
    return charts


def test_every_chart_draws_without_a_console_error(page):
    tab, errors = page
    charts = drawn(tab)
    assert len(charts) == 12
    for chart in charts:
        assert chart["svg"] >= 1 and chart["lines"] >= 4, chart["title"]
    assert errors == []


def test_the_planted_step_carries_its_change_point_marker(page):
    tab, _ = page
    for chart in drawn(tab):
        markers = [t for t in chart["data"] if t["role"] == "change"]
        expected = [("vllm-fa2", [commit_of(STEP_AT)[:8]])] * 2 if "H200" in chart["title"] else []
        assert [(t["backend"], t["x"]) for t in markers] == expected, chart["title"]
    assert tab.locator(".scatterlayer .trace path.point").count() > 0


def test_filters_change_what_is_shown(page):
    tab, errors = page
    tab.select_option("#filter-gpu", "NVIDIA H100")
    assert tab.inner_text("#shown") == "6 of 12 charts shown"
    assert all("H100" in c["title"] for c in drawn(tab))
    tab.select_option("#filter-backend", "vllm-fa3")
    charts = drawn(tab)
    assert charts and all({t["backend"] for t in c["data"]} == {"vllm-fa3"} for c in charts)
    kept = tab.evaluate("() => Array.from(document.querySelectorAll('tr[data-filtered]')).filter(r => !r.hidden)"
                        ".map(r => r.dataset.backend)")
    assert kept and set(kept) == {"vllm-fa3"}  # the tables' rows too (the change points were all vllm-fa2)
    tab.select_option("#filter-kind", "decode")
    assert tab.inner_text("#shown") == "2 of 12 charts shown"
    for name in ("gpu", "backend", "kind"):
        tab.select_option(f"#filter-{name}", "")
    assert tab.inner_text("#shown") == "12 of 12 charts shown" and errors == []
