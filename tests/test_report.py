"""Rows to files: the CSV written row by row, the seed-shaped table, summary.md and plots."""

from __future__ import annotations

import csv

import pandas as pd
import pytest
from conftest import PNG_MAGIC

from attnbench.results import files as report
from attnbench.results import tables as layout
from attnbench.results.plots import plot_runs


def row(num_tokens: int, strategy: str, median_ms: float, verdict: str = "pass", **extra) -> dict:
    return {"kind": "decode", "num_tokens": num_tokens, "num_heads": 4, "num_kv_heads": 2, "head_dim": 16,
            "prefix_ratio": 0.5,
            "backend": "reference", "mode": "eager", "l2": "warm", "strategy": strategy,
            "median_ms": median_ms, "p10_ms": 0.9 * median_ms, "p90_ms": 1.1 * median_ms,
            "verdict": verdict, "reason": "" if verdict == "pass" else "rel L2 error 5e-02 > 0.01",
            "lengths_rule": "decode: N sequences x 1 query token", **extra}


ROWS = [row(8, "unified", 2.0), row(8, "split", 3.0), row(16, "unified", 4.0), row(16, "split", 2.0, "fail")]


def test_row_writer_flushes_each_row_before_close(tmp_path):
    writer = report.RowWriter(tmp_path)
    writer.write(row(8, "unified", 2.0, not_a_column="ignored"))
    with open(tmp_path / "results.csv", newline="") as f:
        written = list(csv.DictReader(f))
    writer.close()
    assert len(written) == 1
    assert list(written[0]) == report.COLUMNS
    assert (written[0]["strategy"], written[0]["median_ms"], written[0]["library"]) == ("unified", "2.0", "")


def test_nan_is_written_and_read_back_as_nan(tmp_path):
    writer = report.RowWriter(tmp_path)
    writer.write(row(8, "unified", 2.0, rel_l2_error=float("nan")))
    writer.close()
    assert pd.isna(report.load_results(tmp_path)["rel_l2_error"].iloc[0])


def test_seed_table_has_the_seed_columns_and_the_ratio():
    table = layout.seed_table(pd.DataFrame(ROWS))
    assert list(table.columns[-4:]) == ["unified ms", "split ms", "split / unified", "check"]
    assert {"query tokens", "heads", "kv heads", "head dim"} <= set(table.columns)
    assert table["split / unified"].tolist() == [1.5, 0.5]
    assert table["check"].tolist() == ["pass", "FAIL"]  # a failing row is shown, never dropped


def test_seed_table_ignores_skipped_and_error_rows():
    rows = [row(8, "unified", float("nan"), "skipped"), row(8, "split", float("nan"), "error")]
    assert layout.seed_table(pd.DataFrame(rows)).empty


def test_seed_table_keeps_each_swept_prefix_ratio():
    rows = [{**row(8, strategy, ms), "kind": "prefix", "prefix_ratio": ratio}
            for ratio, ms in ((0.0, 2.0), (0.9, 1.0)) for strategy in ("unified", "split")]
    assert len(layout.seed_table(pd.DataFrame(rows))) == 2


def test_summary_lists_the_table_the_failures_and_the_rules(tmp_path):
    env = {"command": "attnbench kernel --heads 4", "torch": "2.x", "attnbench_version": "0.1.0", "gpu": None}
    text = report.write_summary(pd.DataFrame(ROWS), tmp_path, env).read_text()
    assert "| query tokens |" in text and "split / unified" in text and "| 1.500 |" in text
    assert "Rows that did not pass" in text and "rel L2 error 5e-02" in text
    assert "decode: N sequences x 1 query token" in text
    assert "`attnbench kernel --heads 4`" in text


def test_parquet_round_trips(tmp_path):
    pytest.importorskip("pyarrow")
    df = pd.DataFrame(ROWS)
    path = report.write_parquet(df, tmp_path)
    pd.testing.assert_frame_equal(report.load_results(path), df)


def test_plots_are_pngs_per_shape(tmp_path):
    paths = plot_runs([("", pd.DataFrame(ROWS))], tmp_path)
    assert sorted(p.name for p in paths) == ["latency_h4kv2_d16.png", "ratio_h4kv2_d16.png"]
    assert all(p.read_bytes().startswith(PNG_MAGIC) for p in paths)
