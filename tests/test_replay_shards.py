"""A replay measured as shards (`replay --shard I/N`) and merged (`attnbench merge`) gives the replay
report an unsharded run gives: the same rows, buckets.csv, summary.md sections and env.json numbers.

Oracle: the same trace replayed whole on the CPU; timings differ run to run, so what is compared is
the structure (which rows, which tables, which choices have totals), never a timing.
"""

from __future__ import annotations

import json
import re

import pandas as pd
from bad_input_cli import assert_one_error_line, invoke
from test_replay import write_trace

FAST = ["--budget-ms", "2", "--device", "cpu", "--exact-sample", "3"]
PLOTS = ("replay_per_step.png", "replay_speedup_cdf.png", "replay_kind_share.png")


def shape_of_summary(text: str) -> tuple[list[str], list[str]]:
    """summary.md's headings and table headers in order, and each table row's first cell (sorted: rows
    are ordered by time): what a report holds, not its numbers."""
    kept, cells = [], []
    for line in text.splitlines():
        if line.startswith("#") or line.startswith("| choice") or line.startswith("| kind"):
            kept.append(line)
        elif line.startswith("| ") and not line.startswith("|---"):
            cells.append(line.split("|")[1].strip())
        elif line.startswith("Per-step oracle") or line.startswith("Bucketing error"):
            kept.append(re.sub(r"[\d.]+ ms|reference \w+", "N", line))
    return kept, sorted(cells)


def keys(path) -> list[tuple]:
    table = pd.read_csv(path / "results.csv")
    return sorted(table[["part", "bucket", "step", "steps", "strategy", "mode", "verdict"]].itertuples(index=False))


def test_merged_shards_give_the_report_of_a_whole_run(tmp_path):
    trace = tmp_path / "t.jsonl"
    write_trace(trace)
    whole, merged = tmp_path / "whole", tmp_path / "merged"
    assert invoke("replay", trace, *FAST, "--out", whole).exit_code == 0
    shards = [tmp_path / f"shard{i}" for i in range(2)]
    for i, out in enumerate(shards):
        result = invoke("replay", trace, *FAST, "--shard", f"{i}/2", "--out", out)
        assert result.exit_code == 0, result.output
        assert "no choice has a total" in (out / "summary.md").read_text()
    result = invoke("merge", *shards, "--out", merged)
    assert result.exit_code == 0, result.output
    assert keys(merged) == keys(whole)
    assert (merged / "buckets.csv").read_text() == (whole / "buckets.csv").read_text()
    summary = (merged / "summary.md").read_text()
    assert shape_of_summary(summary) == shape_of_summary((whole / "summary.md").read_text())
    assert "- shard " not in summary and "Bucketing error (sampled steps" in summary
    numbers = [json.loads((run / "env.json").read_text())["replay"]["results"]["eager"] for run in (merged, whole)]
    for part in ("totals_ms", "exact_sample"):
        assert set(numbers[0][part]) == set(numbers[1][part]) == {"reference unified", "reference split"}
    assert all(v is not None for v in numbers[0]["totals_ms"].values()) and numbers[0]["oracle"] is not None
    assert all((merged / name).is_file() for name in PLOTS)
    plotted = invoke("plot", merged, "--out", tmp_path / "plots")
    assert plotted.exit_code == 0, plotted.output


def test_shards_of_two_bucketings_are_refused_before_anything_is_written(tmp_path):
    trace = tmp_path / "t.jsonl"
    write_trace(trace)
    shards = [tmp_path / f"shard{i}" for i in range(2)]
    for i, (out, ratio) in enumerate(zip(shards, ("2", "1.05"))):
        assert invoke("replay", trace, *FAST, "--bucket-ratio", ratio, "--shard", f"{i}/2", "--out", out).exit_code == 0
    before = {p: p.read_bytes() for s in shards for p in s.iterdir() if p.is_file()}
    result = invoke("merge", *shards, "--out", tmp_path / "merged")
    assert_one_error_line(result)
    assert not (tmp_path / "merged").exists() or not any((tmp_path / "merged").iterdir())
    assert {p: p.read_bytes() for s in shards for p in s.iterdir() if p.is_file()} == before
