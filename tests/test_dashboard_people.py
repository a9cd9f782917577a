"""A dashboard for people (issue 40): a history of every kind of run, read as a person reads it.

The history: three synthetic kernel runs (tests/history_fixtures.py), a fourth filed at the same
commit a few seconds after the third, the H200 replay example (42 buckets, 7 choices), a tiny CPU
atlas and a tiny CPU e2e run. Checked: a replay is one chart of its choices and an atlas one chart
of its choices (not one per bucket or cell), an atlas is filed and listed as an atlas, titles are
built from values (no `name=value` tokens, no word twice), the numbers in hovers and tables are
rounded, two runs of one commit are two places on the x axis, and in Chromium at 1,280 px the
page is no wider than the window and no chart title lies under its chart's toolbar.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from bad_input_cli import invoke
from history_fixtures import DRAW_ALL, EXAMPLE, make_runs
from test_dashboard_browser import CHROMIUM

pytest.importorskip("plotly", reason="the dashboard extra (plotly) is not installed")
pytest.importorskip("ruptures", reason="the dashboard extra (ruptures) is not installed")
pytest_plugins = ["results_fixtures", "atlas_fixtures"]  # e2e_run and atlas_made: real runs to file

REPLAY_CHOICES = 7  # the replay example's backends x strategies, all in graph mode


def same_commit_again(run: Path, to: Path) -> Path:
    """A copy of `run`, filed as run again 20 s later at the same commit (a re-run CI job)."""
    shutil.copytree(run, to)
    env = json.loads((to / "env.json").read_text())
    env["timestamp"] = (dt.datetime.fromisoformat(env["timestamp"]) + dt.timedelta(seconds=20)).isoformat()
    (to / "env.json").write_text(json.dumps(env))
    return to


@pytest.fixture(scope="module")
def history(tmp_path_factory, e2e_run, atlas_made) -> Path:
    root = tmp_path_factory.mktemp("people")
    kernels = [path for path, _, gpu in make_runs(root / "runs", runs=3, step_at=99) if gpu == "NVIDIA H200"]
    runs = [*kernels, same_commit_again(kernels[-1], root / "again"), EXAMPLE.parent / "h200-replay-chat-high"]
    for run in runs:
        assert invoke("history", "add", run, "--history", root / "history").exit_code == 0
    for run, commit in ((atlas_made, "a7145"), (e2e_run, "e2e")):
        filed = invoke("history", "add", run, "--history", root / "history", "--commit", commit)
        assert filed.exit_code == 0, filed.output
    return root / "history"


def site_of(history: Path, out: Path) -> tuple[str, dict]:
    assert invoke("dashboard", history, "--out", out).exit_code == 0
    text = (out / "index.html").read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="dashboard-data">(.*?)</script>', text, re.S)
    return text, json.loads(found.group(1))


@pytest.fixture(scope="module")
def site(history, tmp_path_factory) -> tuple[str, dict, Path]:
    out = tmp_path_factory.mktemp("people-site") / "site"
    return (*site_of(history, out), out / "index.html")


def charts_of(data: dict, run_kind: str) -> list[dict]:
    return [c for c in data["charts"] if c["attributes"]["run_kind"] == [run_kind]]


def lines(chart: dict) -> list[dict]:
    return [t for t in chart["figure"]["data"] if "role" not in t["meta"]]


def test_a_replay_and_an_atlas_are_each_one_chart_of_their_choices(site):
    _, data, _ = site
    replay, = charts_of(data, "replay")
    assert len(lines(replay)) == REPLAY_CHOICES and all(len(t["y"]) == 1 for t in lines(replay))
    atlas, = charts_of(data, "atlas")
    assert sorted(t["name"] for t in lines(atlas)) == ["reference split eager", "reference unified eager"]
    assert len(charts_of(data, "kernel")) == 3 and len(charts_of(data, "e2e")) == 1  # a batch kind each; one model


def test_an_atlas_is_filed_listed_and_drawn_as_an_atlas(history, site, tmp_path):
    kinds = {e["commit"]: e["kind"] for e in json.loads((history / "index.json").read_text())["entries"]}
    assert kinds["a7145"] == "atlas" and kinds["e2e"] == "e2e" and kinds["4efe0f3"] == "replay"
    assert re.search(r"│ atlas\s+│", invoke("history", "list", "--history", history).output)
    text, _, _ = site
    assert re.search(r"<td><code>a7145 [\d-]+ [\d:]+</code></td><td>atlas</td>", text)
    old = tmp_path / "old"  # filed by an older attnbench, which called an atlas a kernel run
    shutil.copytree(history, old)
    index = json.loads((old / "index.json").read_text())
    for entry in index["entries"]:
        entry["kind"] = "kernel" if entry["commit"] == "a7145" else entry["kind"]
    (old / "index.json").write_text(json.dumps(index))
    _, data = site_of(old, tmp_path / "site")
    assert len(charts_of(data, "atlas")) == 1


def test_titles_and_labels_are_built_from_values(site):
    _, data, _ = site
    for chart in data["charts"]:
        words = chart["title"].replace("·", " ").split()
        assert "=" not in chart["title"] and len(words) == len(set(words)), chart["title"]
        assert not any(a[0].isdigit() and b[0].isdigit() for a, b in zip(words, words[1:])), chart["title"]  # named
    e2e, = charts_of(data, "e2e")
    assert e2e["title"].count("tiny") == 1


def significant(number: str) -> int:
    return len(number.replace(".", "").replace("-", "").lstrip("0").split("e")[0])


def test_numbers_are_rounded_for_people(site):
    text, data, _ = site
    hovers = [h for c in data["charts"] for t in c["figure"]["data"] for h in t["hovertext"]]
    numbers = [n for h in hovers for n in re.findall(r"(?<![\w:-])\d+\.\d+(?![\w:])", h.split("<br>", 2)[-1])]
    assert numbers and max(map(significant, numbers)) <= 3, max(numbers, key=significant)
    tables = re.sub(r"<script.*?</script>", "", text, flags=re.S).split("<h2>Latest runs</h2>")[1]
    cells = [n for n in re.findall(r"<td[^>]*>([-\d.]+)(?: ms| s)?</td>", tables) if "." in n]
    assert cells and max(map(significant, cells)) <= 3, max(cells, key=significant)


def test_runs_of_one_commit_are_two_places_on_the_x_axis(site):
    _, data, _ = site
    runs = [r for r in data["runs"] if r.startswith(data["commits"][2][:8])]
    assert len(runs) == 2 and runs[1] == f"{runs[0]} #2"  # the same commit, the same minute: numbered
    for chart in charts_of(data, "kernel"):
        for trace in lines(chart):
            assert len(trace["x"]) == len(set(trace["x"])) == 4, trace["name"]


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)")
def test_at_1280_px_nothing_overflows_and_no_title_lies_under_a_toolbar(site, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        tab = browser.new_page(viewport={"width": 1280, "height": 900})
        tab.goto(site[2].as_uri())
        tab.wait_for_function("window.dashboardReady !== undefined", timeout=60_000)
        tab.evaluate(DRAW_ALL)
        widths = tab.evaluate("() => [document.documentElement.scrollWidth, document.body.scrollWidth, "
                              "window.innerWidth]")
        boxes = tab.evaluate("""() => Array.from(document.querySelectorAll('.chart')).map(d => {
            const box = e => {
                const r = e && e.getBoundingClientRect();
                return r && [r.left, r.top, r.right, r.bottom];
            };
            const title = d.parentElement.querySelector('.chart-title') || d.querySelector('.gtitle');
            return {name: d.dataset.title, title: box(title), toolbar: box(d.querySelector('.modebar'))};
        })""")
        tab.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        browser.close()
    assert widths[0] <= widths[2] and widths[1] <= widths[2], widths
    assert boxes and all(b["title"] and b["toolbar"] for b in boxes), boxes
    for b in boxes:
        (l1, t1, r1, b1), (l2, t2, r2, b2) = b["title"], b["toolbar"]
        assert r1 <= l2 or r2 <= l1 or b1 <= t2 or b2 <= t1, b["name"]
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000


def test_a_band_with_no_positive_number_is_drawn_as_the_median(tmp_path):
    """A crafted replay whose p10 column holds 0 and -1: the totals still draw, the band's low end
    is the median's (a log of it would fail), and the page is written."""
    run = tmp_path / "replay"
    shutil.copytree(EXAMPLE.parent / "h200-replay-chat-high", run)
    rows = pd.read_csv(run / "results.csv", dtype=str, keep_default_na=False)
    crafted = ["0", "-1"] * (len(rows) // 2) + ["0"] * (len(rows) % 2)
    rows.assign(p10_ms=crafted).to_csv(run / "results.csv", index=False)
    assert invoke("history", "add", run, "--history", tmp_path / "h").exit_code == 0
    _, data = site_of(tmp_path / "h", tmp_path / "site")
    replay, = charts_of(data, "replay")
    for trace in lines(replay):
        assert trace["error_y"]["arrayminus"] == [0.0], trace["name"]
