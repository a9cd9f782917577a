"""A history whose every shown field holds markup: the dashboard shows it as text and runs none of it.

Issue 37: a results folder travels, and a backend, GPU, commit, mode, e2e model or replay backend
holding `</script>`-style text ended the page's data element early. Here one run of each kind
(kernel, e2e, replay, atlas) is filed with PAYLOAD in every text the page shows (the row columns,
env.json's GPU, torch and library versions, the replay's trace, the atlas's winners, the commit),
and the site is checked twice: in Python (three script elements, the data element's text has no
character that could open markup and parses as JSON) and in Chromium (no script of the payload
ran, no element of it was made, and the payload is there as text in the tables, the legends and
the tick labels).
"""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from bad_input_cli import invoke
from history_fixtures import DRAW_ALL, EXAMPLE
from test_dashboard_browser import CHROMIUM

pytest.importorskip("plotly", reason="the dashboard extra (plotly) is not installed")
pytest.importorskip("ruptures", reason="the dashboard extra (ruptures) is not installed")
pytest_plugins = ["results_fixtures", "atlas_fixtures"]  # e2e_run and atlas_made: real runs to file

# `<!--<script>` puts the HTML parser into its "double escaped" script state, in which the data
# element's own `</script>` no longer ends it; the rest would end it early or make elements
PAYLOAD = "<!--<script></script><script>window.PWNED=1</script><img src=x onerror=alert(1)>&amp;\u2028"
REPLAY = EXAMPLE.parent / "h200-replay-chat-high"


def crafted(source: Path, to: Path, rows: dict, env: dict, cells: bool = False) -> Path:
    """A copy of the run at `source` with PAYLOAD put into `rows` columns and `env` entries."""
    shutil.copytree(source, to, ignore=shutil.ignore_patterns("*.parquet", "*.png"))
    table = pd.read_csv(to / "results.csv", dtype=str, keep_default_na=False)
    table.assign(**{c: PAYLOAD + table[c] for c in rows}).to_csv(to / "results.csv", index=False)
    record = json.loads((to / "env.json").read_text())
    record.update(env)
    (to / "env.json").write_text(json.dumps(record))
    if cells:
        found = pd.read_csv(to / "cells.csv", dtype=str, keep_default_na=False)
        found.assign(winner=PAYLOAD + "winner").to_csv(to / "cells.csv", index=False)
    return to


@pytest.fixture(scope="module")
def site(tmp_path_factory, e2e_run, atlas_made) -> Path:
    root = tmp_path_factory.mktemp("payload")
    machine = {"gpu": {"name": PAYLOAD + "gpu"}, "torch": PAYLOAD + "torch",
               "backend_libraries": {PAYLOAD + "vllm-fa2": PAYLOAD + "library"}}
    runs = [crafted(EXAMPLE, root / "kernel", ("backend", "mode", "gpu"), machine),
            crafted(e2e_run, root / "e2e", ("model", "backend"), {}),
            crafted(REPLAY, root / "replay", ("backend",), {"timestamp": "2026-12-01T00:00:00+00:00", "replay": {
                **json.loads((REPLAY / "env.json").read_text())["replay"], "trace": PAYLOAD + "trace.jsonl"}}),
            crafted(atlas_made, root / "atlas", ("backend",), {}, cells=True)]
    for number, run in enumerate(runs):
        filed = invoke("history", "add", run, "--history", root / "history", "--commit", f"{PAYLOAD}{number}")
        assert filed.exit_code == 0, filed.output
    assert invoke("dashboard", root / "history", "--out", root / "site").exit_code == 0
    return root / "site" / "index.html"


class Elements(HTMLParser):
    """Every start tag, and the text of the data element, as an HTML parser reads the page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.data = ""
        self.inside = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.inside = tag == "script" and ("id", "dashboard-data") in attrs

    def handle_endtag(self, tag):
        self.inside = False

    def handle_data(self, data):
        self.data += data if self.inside else ""


def test_the_page_holds_three_scripts_and_its_data_is_inert_json(site):
    text = site.read_text(encoding="utf-8")
    parsed = Elements()
    parsed.feed(text)
    assert parsed.tags.count("script") == 3 and "img" not in parsed.tags
    assert not re.search(r"[<>&\u2028\u2029]", parsed.data)  # nothing in it an HTML parser could act on
    data = json.loads(parsed.data)
    assert PAYLOAD + "0" in data["commits"]
    assert "<script>window.PWNED" not in text and "<img src=x" not in text  # the payload is only ever escaped


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)")
def test_in_chromium_no_payload_runs_and_every_one_is_shown_as_text(site):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        tab = browser.new_page(viewport={"width": 1280, "height": 1000})
        dialogs, errors = [], []
        tab.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        tab.goto(site.as_uri())
        tab.wait_for_function("window.dashboardReady !== undefined", timeout=60_000)
        tab.evaluate(DRAW_ALL)
        found = tab.evaluate("""() => ({pwned: typeof window.PWNED, scripts: document.scripts.length,
            images: document.querySelectorAll('img').length, body: document.body.innerText,
            options: Array.from(document.querySelectorAll('option')).map(o => o.textContent),
            charts: Array.from(document.querySelectorAll('.chart')).map(d => d.textContent),
            titles: Array.from(document.querySelectorAll('.chart-title')).map(d => d.textContent)})""")
        browser.close()
    assert (found["pwned"], found["scripts"], found["images"], dialogs, errors) == ("undefined", 3, 0, [], [])
    shown = PAYLOAD.replace("\u2028", "")  # innerText drops the line separator
    for field in ("gpu", "library", "winner"):  # in the page's tables
        assert shown + field in found["body"].replace("\u2028", ""), field
    for field in ("gpu", "vllm-fa2", "reference", "flashinfer"):  # the filters: row backends of each kind, the GPU
        assert any(o.startswith(PAYLOAD + field) for o in found["options"]), field
    drawn = "".join(found["charts"]).replace("\u2028", "")  # the SVG text of legends, hovers and ticks
    for field in ("vllm-fa2", "graph"):  # legends (backend, mode)
        assert shown + field in drawn, field
    titles = "".join(found["titles"]).replace("\u2028", "")
    # chart titles: the GPU, the e2e model, and the replay's trace (by its file name: after the payload's last /)
    for said in (shown + "gpu", shown + "tiny", shown.rpartition("/")[2] + "trace.jsonl"):
        assert said in titles, said
    assert shown[:8] in drawn  # the x axis: the commit (its first 8 characters)
