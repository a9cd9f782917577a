"""History and dashboard on the CPU: filing runs, the change-point detector, the site's data, BMF.

The history is made for the test (tests/history_fixtures.py): 50 H200 runs with a 5 % step planted
at commit 30 in the vllm-fa2 rows only, and 6 flat H100 runs. The oracle is the plant itself: the
detector and the site must name that commit, in those rows, and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

from bad_input_cli import invoke
from history_fixtures import EXAMPLE, STEP, STEP_AT, commit_of, make_history, make_runs

pytest.importorskip("plotly", reason="the dashboard extra (plotly) is not installed")
pytest.importorskip("ruptures", reason="the dashboard extra (ruptures) is not installed")

from attnbench.results.changepoints import change_points  # noqa: E402

pytest_plugins = ["results_fixtures"]  # cpu_run and e2e_run: real runs to file


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    return make_history(tmp_path_factory.mktemp("history"))[0]


@pytest.fixture(scope="module")
def site(history, tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "site"
    result = invoke("dashboard", history, "--out", out)
    assert result.exit_code == 0, result.output
    return out / "index.html"


def site_data(index: Path) -> dict:
    text = index.read_text()
    found = re.search(r'<script type="application/json" id="dashboard-data">(.*?)</script>', text, re.S)
    return json.loads(found.group(1))


def noisy(n: int, seed: int, sigma: float = 0.01) -> np.ndarray:
    return np.exp(np.random.default_rng(seed).normal(0.0, sigma, n))


@pytest.mark.parametrize("seed", range(5))
def test_a_planted_step_is_found_at_its_run_and_nowhere_else(seed):
    values = noisy(50, seed) * np.where(np.arange(50) >= 30, 1.05, 1.0)
    found = change_points(values)
    assert [c.index for c in found] == [30]
    assert found[0].change == pytest.approx(0.05, abs=0.01)


@pytest.mark.parametrize("seed", range(5))
def test_a_flat_series_and_a_throttled_outlier_have_no_change_point(seed):
    values = noisy(50, 100 + seed)
    assert change_points(values) == []
    values[20] *= 1.3  # one run on a throttled GPU
    assert change_points(values) == []


def test_a_step_below_the_minimum_change_or_a_short_series_is_not_a_change():
    values = np.exp(np.random.default_rng(7).normal(0.0, 0.001, 50)) * np.where(np.arange(50) >= 25, 1.01, 1.0)
    assert [c.index for c in change_points(values, min_change=0.005)] == [25]
    assert change_points(values) == []  # 1 % < the default 2 %
    assert change_points([1.0, 1.0, 2.0, 2.0, 2.0]) == []


def test_the_sites_data_marks_the_planted_commit_and_no_other(site):
    data = site_data(site)
    planted = commit_of(STEP_AT)
    assert len(data["commits"]) == 50
    assert len(data["charts"]) == 6  # a chart per batch kind and GPU: its tokens, backends and strategies are lines
    for chart in data["charts"]:
        h200 = chart["attributes"]["gpu"] == ["NVIDIA H200"]
        assert chart["changes"] == ([planted] if h200 else []), chart["title"]
        markers = [t for t in chart["figure"]["data"] if t["meta"].get("role") == "change"]
        assert [(t["meta"]["backend"], [x.split("<br>")[0] for x in t["x"]]) for t in markers] == \
            ([("vllm-fa2", [planted[:8]])] * 4 if h200 else [])  # 2 strategies x 2 token counts
        for trace in markers:  # the step as measured: 5 % planted under 1 % noise
            said = re.match(r"change point at (\w+) [-\d: ]+: ([-+\d.]+)%", trace["hovertext"][0])
            assert said.group(1) == planted[:8] and float(said.group(2)) / 100 == pytest.approx(STEP, abs=0.015)


def test_every_line_carries_its_interval_and_the_filters_list_every_value(site):
    data = site_data(site)
    lines = [t for c in data["charts"] for t in c["figure"]["data"] if "role" not in t["meta"]]
    assert len(lines) == 48  # 12 rows x 2 backends x 2 GPUs
    for trace in lines:
        assert trace["error_y"]["array"] and min(trace["error_y"]["array"]) >= 0
    text = site.read_text()
    for value in ("NVIDIA H100", "NVIDIA H200", "vllm-fa2", "vllm-fa3", "unified", "split", "decode", "32/8x128",
                  "kernel", "graph"):
        assert f'<option value="{value}">' in text
    assert "src=" not in text.split("<style>")[0] and "https://" not in re.sub(r"<script>.*?</script>", "", text,
                                                                               flags=re.S)


def digest(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_history_add_files_a_run_lists_it_and_refuses_it_twice(tmp_path):
    runs = make_runs(tmp_path / "runs", runs=3, step_at=99)
    history = tmp_path / "history"
    before = digest(tmp_path / "runs")
    for path, _, _ in runs:
        result = invoke("history", "add", path, "--history", history)
        assert result.exit_code == 0 and "filed" in result.output, result.output
    assert digest(tmp_path / "runs") == before  # the runs are only read
    index = json.loads((history / "index.json").read_text())
    assert [e["commit"] for e in index["entries"]][:3] == [commit_of(i) for i in range(3)]
    entry = index["entries"][0]
    assert entry["gpu"] == "NVIDIA H200" and entry["libraries"]["vllm-fa2"] == "vllm.vllm_flash_attn/0.24.0"
    assert (history / "runs" / entry["id"] / "results.csv").read_bytes() == (runs[0][0] / "results.csv").read_bytes()
    again = invoke("history", "add", runs[0][0], "--history", history)
    assert again.exit_code == 1 and "--replace" in again.stderr
    assert invoke("history", "add", runs[0][0], "--history", history, "--replace").exit_code == 0
    assert len(json.loads((history / "index.json").read_text())["entries"]) == len(index["entries"])
    listed = invoke("history", "list", "--history", history)
    assert listed.exit_code == 0 and f"{len(runs)} runs" in listed.output and "H100" in listed.output


def test_commit_and_date_given_by_ci_override_env_json(tmp_path):
    (path, _, _), = make_runs(tmp_path / "runs", runs=1, step_at=99)[:1]
    result = invoke("history", "add", path, "--history", tmp_path / "h", "--commit", "abc123",
                    "--date", "2026-12-01T10:00:00Z")
    assert result.exit_code == 0, result.output
    entry = json.loads((tmp_path / "h" / "index.json").read_text())["entries"][0]
    assert (entry["commit"], entry["date"]) == ("abc123", "2026-12-01T10:00:00+00:00")


def test_an_atlas_runs_winner_map_is_shown(tmp_path):
    (path, _, _), = make_runs(tmp_path / "runs", runs=1, step_at=99)[:1]
    (path / "cells.csv").write_text("kind,num_tokens,winner\ndecode,64,vllm-fa2 split\nmixed,512,flashinfer unified\n")
    assert invoke("history", "add", path, "--history", tmp_path / "h").exit_code == 0
    assert invoke("dashboard", tmp_path / "h", "--out", tmp_path / "site").exit_code == 0
    text = (tmp_path / "site" / "index.html").read_text()
    assert "Winner map" in text and "<b>flashinfer unified</b>" in text


def test_bmf_export_is_latency_in_ns_named_as_gab(tmp_path):
    bmf = json.loads(invoke("export", EXAMPLE, "--format", "bmf").stdout)
    gab = json.loads(invoke("export", EXAMPLE, "--format", "gab").stdout)
    assert list(bmf) == [e["name"] for e in gab]
    for entry in gab:
        metric = bmf[entry["name"]]["latency"]
        assert metric["value"] == pytest.approx(entry["value"] * 1e6)
        assert metric["lower_value"] <= metric["value"] <= metric["upper_value"]


def test_every_kind_of_run_files_and_draws(tmp_path, cpu_run, e2e_run):
    """Real runs, not synthetic ones: a CPU kernel sweep and e2e run made here, and the H200 replay
    example (whose env.json records its commit and time: filed with no flag)."""
    replay = EXAMPLE.parent / "h200-replay-chat-high"
    assert invoke("history", "add", replay, "--history", tmp_path / "h").exit_code == 0
    for run, commit in ((cpu_run, "k1"), (e2e_run, "e1")):
        result = invoke("history", "add", run, "--history", tmp_path / "h", "--commit", commit, "--date", "2026-12-01")
        assert result.exit_code == 0, result.output
    kinds = {e["commit"]: e["kind"] for e in json.loads((tmp_path / "h" / "index.json").read_text())["entries"]}
    assert kinds == {"k1": "kernel", "e1": "e2e", "4efe0f3": "replay"}
    assert invoke("dashboard", tmp_path / "h", "--out", tmp_path / "site").exit_code == 0
    data = site_data(tmp_path / "site" / "index.html")
    titles = [c["title"] for c in data["charts"]]
    assert "cpu · e2e · tiny bf16 · 8 in / 2 out tokens" in titles, titles
    assert "NVIDIA H200 · replay · chat-high.jsonl · 32/8x128 bf16" in titles
    assert "cpu · kernel · decode 4/2x32 bf16 · context 32" in titles
    assert all(c["changes"] == [] for c in data["charts"])  # one run per series: nothing to find
