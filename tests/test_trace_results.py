"""An `e2e --trace` run read by the results tools: its results.csv (each metric over the serves),
split vs unified over paired serves, and `plot`, `export` and `compare` on two CPU runs of a tiny
trace. The verdicts' GPU path on synthetic rows (a CPU run gets none)."""

from __future__ import annotations

import re

import json

import pandas as pd
import pytest
from bad_input_cli import invoke

from attnbench.results.compare import compare_runs
from attnbench.results.read import TRACE, load_run
from attnbench.results.trace_results import metric_rows, strategy_verdicts

REQUESTS = [(0.0, 8, 3), (0.02, 5, 2)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two CPU runs of a 2-request trace, 2 serves per choice."""
    root = tmp_path_factory.mktemp("trace-runs")
    trace = root / "t.requests.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": i, "output_length": o}) + "\n"
                             for t, i, o in REQUESTS))
    made = []
    for name in ("a", "b"):
        result = invoke("e2e", "--trace", trace, "--device", "cpu", "--max-requests", "2", "--out", root / name)
        assert result.exit_code == 0, result.output
        made.append(root / name)
    return made


def test_results_csv_holds_each_metric_over_the_serves(runs):
    run = load_run(runs[0], "RESULTS")
    assert run.kind is TRACE and run.source.name == "results.csv"
    serves = pd.read_csv(runs[0] / "trace.csv")
    rows = run.rows.set_index(["strategy", "metric"])
    for strategy, g in serves.groupby("strategy"):
        want = sorted(g["ttft_p50_ms"])
        got = rows.loc[(strategy, "ttft_p50")]
        assert got["serves"] == 2 and got["serve_min_ms"] == pytest.approx(want[0], rel=1e-5)
        assert got["serve_max_ms"] == pytest.approx(want[1], rel=1e-5)
        assert got["serve_median_ms"] == pytest.approx(sum(want) / 2, rel=1e-5)
        assert sorted(float(x) for x in got["serves_ms"].split()) == pytest.approx(want, rel=1e-5)
    assert (run.rows["graphs_captured_while_serving"] == 0).all()


def test_plot_draws_the_metrics_of_one_run_and_of_two_overlaid(runs, tmp_path):
    result = invoke("plot", runs[0], runs[1], "--out", tmp_path / "p")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "p" / "trace_metrics.png").stat().st_size > 0
    before = (runs[0] / "trace_metrics.png").stat().st_mtime_ns
    result = invoke("plot", runs[0])  # redrawn in the run's own directory
    assert result.exit_code == 0, result.output
    assert (runs[0] / "trace_metrics.png").stat().st_mtime_ns >= before


@pytest.mark.parametrize("fmt", ["gab", "bmf", "md", "csv"])
def test_export_writes_every_format(runs, fmt, tmp_path):
    out = tmp_path / f"x.{fmt}"
    result = invoke("export", runs[0], "--format", fmt, "--out", out)
    assert result.exit_code == 0, result.output
    text = out.read_text()
    if fmt == "gab":
        names = [e["name"] for e in json.loads(text)]
        assert len(names) == len(set(names)) == 2 * 17 and any(n.endswith("| tpot_p50") for n in names)
    elif fmt == "bmf":
        report = json.loads(text)
        entry = next(v["latency"] for k, v in report.items() if k.endswith("reference split eager | ttft_p50"))
        assert entry["lower_value"] <= entry["value"] <= entry["upper_value"]
    elif fmt == "md":
        assert "median over the serves" in text and "ttft_p99 ms" in text
    else:
        assert load_run(out, "CSV").kind is TRACE


def test_compare_pairs_two_trace_runs_per_backend_strategy_and_metric(runs, tmp_path):
    result = invoke("compare", runs[0], runs[1], "--markdown", tmp_path / "c.md")
    assert result.exit_code == 0, result.output
    assert "CPU timings: no verdict" in result.output and "tpot_p50" in result.output
    assert "slower" not in (tmp_path / "c.md").read_text().split("|")[-1]


def synthetic(device: str, tpot: dict[str, list[float]]) -> pd.DataFrame:
    """trace.csv rows of one backend, each strategy's serves with the given TPOT p50 (the other
    metrics equal), as a GPU or CPU run would write them."""
    rows = []
    for strategy, values in tpot.items():
        for i, v in enumerate(values, 1):
            rows.append({"model": "m", "dtype": "bfloat16", "block_size": 16, "chunk_size": 0, "max_num_seqs": 4,
                         "arrivals": "trace", "trace": "t.jsonl", "backend": "vllm-fa3", "strategy": strategy,
                         "mode": "graph", "cudagraph": "full", "library": "lib", "library_version": "1",
                         "device": device, "gpu": "H", "agreement": "match", "serve": i, "verdict": "pass",
                         "reason": "", "duration_s": 1.0, "graphs_captured_while_serving": 0,
                         **{f"{m}_{s}_ms": 10.0 for m in ("ttft", "itl", "e2el") for s in ("mean", "p50", "p90", "p99")},
                         **{f"tpot_{s}_ms": v for s in ("mean", "p50", "p90", "p99")}})
    return pd.DataFrame(rows)


def test_split_vs_unified_is_called_only_where_the_paired_interval_clears_it():
    clear = strategy_verdicts(synthetic("cuda", {"unified": [5.0, 5.1, 4.9], "split": [6.0, 6.1, 5.9]}), cpu=False)
    tpot = clear.set_index("metric").loc["tpot_p50"]
    assert tpot["verdict"] == "split slower" and float(tpot["interval"].split("x – ")[0]) > 1.05
    assert re.fullmatch(r"\d\.\d+x – \d\.\d+x", tpot["interval"]), tpot["interval"]
    assert clear.set_index("metric").loc["ttft_p50", "verdict"] == "same"
    noisy = strategy_verdicts(synthetic("cuda", {"unified": [5.0, 8.0], "split": [6.0, 5.0]}), cpu=False)
    assert noisy.set_index("metric").loc["tpot_p50", "verdict"] == "noisy"
    on_cpu = strategy_verdicts(synthetic("cpu", {"unified": [5.0, 5.1, 4.9], "split": [6.0, 6.1, 5.9]}), cpu=True)
    assert set(on_cpu["verdict"]) == {"-"}


def test_compare_gives_gpu_trace_runs_a_verdict_from_the_serves():
    base = metric_rows(synthetic("cuda", {"unified": [5.0, 5.1, 4.9]}))
    new = metric_rows(synthetic("cuda", {"unified": [6.0, 6.1, 5.9]}))
    result = compare_runs(base, new, 0.05, kind=TRACE).rows.set_index("metric")
    assert result.loc["tpot_p50", "method"] == "replicates" and result.loc["tpot_p50", "verdict"] == "slower"
    assert result.loc["ttft_p50", "verdict"] == "same" and not result["label"].str.contains("nan").any()


def test_intervals_and_times_read_with_units_and_sensible_rounding():
    """ea3bb51 printed `0.000-313544.721` for two serves' interval and `1.622e+04 (1.596e+04-1.647e+04)` for ms."""
    from attnbench.results.trace_results import ratio_interval, readable_ms

    assert ratio_interval(0.0, 313544.721) == "< 0.001x – > 1000x"
    assert ratio_interval(0.3201, 14.25) == "0.32x – 14.2x"
    assert [readable_ms(v) for v in (16220.4, 131.3, 74.96, 0.04567)] == ["16,220", "131", "75", "0.0457"]
