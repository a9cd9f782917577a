"""Large replay buckets cut into pieces (traces/buckets.py `split`), the 2 % goal in a replay's
report, and benchmarks/replay_scale.py's closing table.

Oracle: the pieces are checked against what the guide states, by hand: they partition the bucket,
hold near-equal step counts of at most 1/split of the trace, run along the one size that varies,
and each piece's weights add up to its count and reproduce its sums of the work sizes summed here
from the requests themselves.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from bad_input_cli import invoke
from bad_results import refused

from attnbench.errors import UsageError
from attnbench.results.replay import SampleError
from attnbench.traces.buckets import MIN_PIECE, bucket_steps, split_steps, step_buckets, work
from attnbench.traces.jsonl import trace_text
from attnbench.traces.steps import Header, Request, Shape, Trace, TraceStep

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import replay_scale  # noqa: E402


def one_bin_trace(count: int, seed: int = 0, equal: bool = False) -> Trace:
    """`count` decode steps of 4 rows whose total KV tokens all fall in one ratio-2 bin (4096-8191);
    `equal`: the 4 rows of a step of one length (its longest KV length varies as its total does)."""
    draw = random.Random(seed)
    lengths = (lambda: [draw.randint(1024, 2047)] * 4) if equal else (lambda: [draw.randint(1024, 2047) for _ in range(4)])
    steps = tuple(TraceStep(tuple(Request(1, kv) for kv in lengths())) for _ in range(count))
    return Trace(Header("test", Shape(2, 1, 16)), steps)


def kv_total(step: TraceStep) -> int:
    return sum(r.kv_len for r in step.requests)


def test_a_bucket_of_most_steps_is_cut_into_near_equal_pieces_along_its_kv_tokens():
    trace = one_bin_trace(200, equal=True)
    whole = bucket_steps(trace, 2.0, split=1)
    pieces = bucket_steps(trace, 2.0, split=4)
    assert len(whole) == 1 and len(pieces) == 4  # 200 steps, at most max(64, 200 / 4) a piece
    assert sorted(s for b in pieces for s in b.steps) == list(range(200))
    assert sorted(len(b.steps) for b in pieces) == [50, 50, 50, 50]
    assert [b.index for b in pieces] == [0, 1, 2, 3] and [b.steps[0] for b in pieces] == sorted(b.steps[0] for b in pieces)
    ranges = sorted((min(kv_total(trace.steps[s]) for s in b.steps), max(kv_total(trace.steps[s]) for s in b.steps))
                    for b in pieces)
    assert all(high <= next_low for (_, high), (next_low, _) in zip(ranges, ranges[1:]))
    assert sorted(b.piece for b in pieces) == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert "(piece " in pieces[0].describe(2.0) and "piece" not in whole[0].describe(2.0)
    assert step_buckets(pieces, 200)[pieces[2].steps[0]] == 2


def test_each_piece_reproduces_its_own_count_and_sums():
    trace = one_bin_trace(300, seed=1)
    for bucket in bucket_steps(trace, 2.0, split=3):
        assert sum(bucket.weights) == pytest.approx(len(bucket.steps))
        rows = [len(trace.steps[s].requests) for s in bucket.steps]
        kv = [kv_total(trace.steps[s]) for s in bucket.steps]
        weighed = lambda of: sum(w * of(trace.steps[s]) for s, w in zip(bucket.representatives, bucket.weights))  # noqa: E731
        assert weighed(lambda s: len(s.requests)) == pytest.approx(sum(rows))
        assert weighed(kv_total) == pytest.approx(sum(kv), rel=1e-9)


def test_a_short_trace_stays_whole_and_split_steps_partitions_any_count():
    trace = one_bin_trace(MIN_PIECE)
    assert len(bucket_steps(trace, 2.0, split=64)) == 1  # no piece below MIN_PIECE steps
    measured = np.array([work(s) for s in one_bin_trace(37).steps], dtype=float)
    for pieces in (1, 2, 3, 7, 37):
        parts = split_steps(list(range(37)), measured, pieces)
        assert len(parts) == pieces and sorted(s for p in parts for s in p) == list(range(37))
        assert max(map(len, parts)) - min(map(len, parts)) <= 1


@pytest.mark.parametrize("split", [0, -1, 4097, True, 2.5])
def test_a_bad_split_is_refused(split):
    with pytest.raises(UsageError, match="--bucket-split"):
        bucket_steps(one_bin_trace(3), 2.0, split=split)


@pytest.mark.parametrize("value", ["0", "-3", "x", "5000", "1.5"])
def test_a_bad_bucket_split_flag_is_one_error_line(tmp_path, value):
    trace = tmp_path / "t.jsonl"
    trace.write_text(trace_text(one_bin_trace(4)))
    refused(["replay", trace, "--budget-ms", "2", "--device", "cpu", "--bucket-split", value, "--out", tmp_path / "o"],
            ["--bucket-split"], tmp_path)
    assert not (tmp_path / "o").exists()


def test_the_goal_is_met_within_two_percent_either_way():
    said = [SampleError("c", 10, 100.0, 100.0 + e, e, 0.5).within_goal for e in (-2.5, -2.0, 0.0, 1.99, 2.01)]
    assert said == [False, True, True, True, False]


def test_replay_scale_closes_with_points_times_and_the_goal_per_choice():
    env = {"replay": {"steps": 10, "kinds": {"decode": 10}, "buckets": 3, "bucket_ratio": 3.0, "bucket_split": 16,
                      "exact_sample": 4, "results": {"graph": {
                          "totals_ms": {"a unified": 12.5, "b split": None},
                          "oracle": None,
                          "exact_sample": {"a unified": {"steps": 4, "error_pct": -2.4, "stderr_pct": 0.8}}}}}}
    lines = replay_scale.report(env, 50.0, 20.0, {"bucket": 7, "sample": 4}, stopped=True)
    text = "\n".join(lines)
    assert "INTERRUPTED" in text and "| buckets (goal: <= 300 s for 4 backends x 2 strategies) | 7 | 20.0 |" in text
    assert "| sampled steps | 4 | 30.0 |" in text
    assert "| a unified | 12.500 | -2.40 % | 0.8 % | 4 | no |" in text
    assert "| b split | incomplete | not measured |" in text


def test_replay_scale_resumed_reports_both_parts(tmp_path, monkeypatch, capsys):
    out = tmp_path / "scale"
    (out / "replay").mkdir(parents=True)
    env = {"replay": {"steps": 10, "kinds": {"decode": 10}, "buckets": 3, "bucket_ratio": 3.0, "bucket_split": 12,
                      "exact_sample": 4, "results": {}}}
    (out / "replay" / "env.json").write_text(json.dumps(env))
    calls = []
    monkeypatch.setattr(replay_scale, "replay", lambda *args, **kw: calls.append((args, kw)) or (50.0, None, False))
    monkeypatch.setattr(replay_scale, "points_of", lambda results: {"bucket": 7, "sample": 4})
    monkeypatch.setattr(sys, "argv", ["replay_scale.py", "--out", str(out), "--resume"])
    with pytest.raises(SystemExit, match="timing.json unreadable"):  # no first part to go on with
        replay_scale.main()
    (out / "timing.json").write_text(json.dumps({"parts": [{"wall_s": 100.0, "buckets_s": 60.0, "interrupted": True}]}))
    replay_scale.main()
    args, kw = calls[-1]
    assert args[-2:] == ("--resume", str(out / "replay")) and "--force" not in args and kw["resumed"]
    report = (out / "report.md").read_text()
    assert "| buckets (goal: <= 300 s for 4 backends x 2 strategies) | 7 | 60.0 |" in report  # the first part's
    assert "| sampled steps | 4 | 90.0 |" in report and "| the whole replay command | 11 | 150.0 |" in report
    assert "INTERRUPTED" not in report  # the last part finished
    assert [p["wall_s"] for p in json.loads((out / "timing.json").read_text())["parts"]] == [100.0, 50.0]


def test_replay_scale_with_no_sample_times_the_buckets_alone(tmp_path, monkeypatch):
    out = tmp_path / "scale"
    env = {"replay": {"steps": 10, "kinds": {"decode": 10}, "buckets": 3, "bucket_ratio": 3.0, "bucket_split": 12,
                      "exact_sample": 0, "results": {}}}

    def made(*args):  # the trace command: the replay's directory appears as the replay would write it
        (out / "replay").mkdir(parents=True)
        (out / "replay" / "env.json").write_text(json.dumps(env))
        return 1.0
    monkeypatch.setattr(replay_scale, "attnbench", made)
    calls = []
    monkeypatch.setattr(replay_scale, "replay", lambda *args, **kw: calls.append(args) or (200.0, None, False))
    monkeypatch.setattr(replay_scale, "points_of", lambda results: {"bucket": 7, "sample": 0})
    monkeypatch.setattr(sys, "argv", ["replay_scale.py", "--out", str(out), "--exact-sample", "0"])
    replay_scale.main()
    report = (out / "report.md").read_text()
    assert "| buckets (goal: <= 300 s for 4 backends x 2 strategies) | 7 | 200.0 |" in report
    args = list(calls[0])  # the goal's backends are named, whatever else is installed
    assert args[args.index("--backend") + 1] == "vllm-fa2,vllm-fa3,flashinfer,flashinfer-ba"


def test_a_cpu_replay_times_each_piece_and_records_the_split(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(trace_text(one_bin_trace(130)))
    out = tmp_path / "run"
    result = invoke("replay", trace, "--device", "cpu", "--budget-ms", "1", "--steps", "130", "--bucket-ratio", "2",
                    "--bucket-split", "2", "--strategy", "unified", "--out", out)
    assert result.exit_code == 0, result.output
    steps = pd.read_csv(out / "buckets.csv")
    rows = pd.read_csv(out / "results.csv")
    env = json.loads((out / "env.json").read_text())
    assert sorted(steps.groupby("bucket").size()) == [65, 65]  # 130 steps, at most max(64, 130 / 2) a piece
    assert set(rows["bucket"]) == {0, 1} and rows["lengths_rule"].str.contains(r"\(piece [12] of 2\)").all()
    assert env["sweep"]["flags"]["--bucket-split"] == "2" and env["replay"]["bucket_split"] == 2
