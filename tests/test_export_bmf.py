"""`export --format bmf` on its own terms: the measures a Bencher user tracks, not only gab's value.

Bencher Metric Format (https://bencher.dev/docs/reference/bencher-metric-format/): per benchmark,
measures keyed by slug, each {value, lower_value, upper_value} with the bounds optional; built-in
`latency` is in ns and `throughput` in operations/s. Checked against the results.csv columns read
here plainly, not against the exporter's helpers.
"""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from bad_input_cli import invoke
from history_fixtures import EXAMPLE

pytest_plugins = ["results_fixtures"]  # e2e_run: a real CPU e2e run


def bmf_of(run) -> dict:
    result = invoke("export", run, "--format", "bmf")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_kernel_row_has_latency_flops_and_bandwidth_within_its_interval():
    bmf, rows = bmf_of(EXAMPLE), pd.read_csv(EXAMPLE / "results.csv")
    timed = rows[rows["verdict"].isin(["pass", "fail"])]
    assert len(bmf) == len(timed) and all(set(m) == {"latency", "throughput", "bandwidth-gb-s"} for m in bmf.values())
    for measures, (_, row) in zip(bmf.values(), timed.iterrows()):
        flops, bandwidth = measures["throughput"], measures["bandwidth-gb-s"]
        assert flops["value"] == pytest.approx(row["tflops"] * 1e12)
        assert flops["lower_value"] == pytest.approx(row["tflops"] * 1e12 * row["median_ms"] / row["p90_ms"])
        assert flops["upper_value"] == pytest.approx(row["tflops"] * 1e12 * row["median_ms"] / row["p10_ms"])
        assert bandwidth["value"] == pytest.approx(row["gbps"])
        assert bandwidth["lower_value"] <= bandwidth["value"] <= bandwidth["upper_value"]
        assert measures["latency"]["upper_value"] == pytest.approx(row["p90_ms"] * 1e6)


def test_a_missing_rate_or_bound_is_left_out_not_written_as_nan(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(EXAMPLE, run)
    rows = pd.read_csv(run / "results.csv")
    first = rows.index[rows["verdict"].isin(["pass", "fail"])][0]
    rows.loc[first, ["tflops", "p10_ms"]] = None
    rows.to_csv(run / "results.csv", index=False)
    text = invoke("export", run, "--format", "bmf").stdout
    assert "NaN" not in text and "Infinity" not in text
    measures = next(iter(json.loads(text).values()))
    assert "throughput" not in measures and set(measures["latency"]) == {"value"}
    assert set(measures["bandwidth-gb-s"]) == {"value"}  # its lower bound needs p10: no half interval


def test_an_e2e_row_has_its_output_tokens_per_second_as_throughput(e2e_run):
    bmf, rows = bmf_of(e2e_run), pd.read_csv(e2e_run / "results.csv")
    timed = rows[rows["verdict"].isin(["pass", "fail"])]
    assert len(bmf) == len(timed) > 0
    for measures, (_, row) in zip(bmf.values(), timed.iterrows()):
        assert measures["throughput"] == {"value": pytest.approx(row["output_tok_s"])}
        assert measures["latency"]["value"] == pytest.approx(row["request_p50_s"] * 1e9)
