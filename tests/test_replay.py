"""`attnbench replay TRACE` end to end on the CPU (the reference backend), and on a GPU when there is one.

Oracle: the trace written here and bucketed by the rule (traces/buckets.py, tested by hand in
test_replay_buckets.py); a run that is interrupted then resumed against one that ran whole; the
directory's files before and after --force.
"""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest
import torch
import typer.main
from bad_input_cli import invoke
from test_run_dir import interrupt_at

from attnbench.cli.main import app
from attnbench.kernels import sweep
from attnbench.runs.replay import REPLAY_COLUMNS, ReplayArgs
from attnbench.traces.buckets import bucket_steps
from attnbench.traces.jsonl import read_trace, trace_text
from attnbench.traces.steps import Header, Request, Shape, Trace, TraceStep

FAST = ["--budget-ms", "2", "--device", "cpu", "--bucket-ratio", "2"]  # the CPU default: the reference backend


def write_trace(path, shape: Shape = Shape(2, 1, 16)) -> Trace:
    rows = [[(1, 9), (1, 30)], [(1, 10), (1, 31)], [(1, 40), (8, 8)], [(12, 12)], [(1, 7), (1, 7), (1, 9), (1, 60)],
            [(1, 11), (1, 29)], [(1, 41), (6, 20)]]
    trace = Trace(Header("test", shape), tuple(TraceStep(tuple(Request(q, kv) for q, kv in step)) for step in rows))
    path.write_text(trace_text(trace))
    return trace


def keys(out) -> list[tuple]:
    table = pd.read_csv(out / "results.csv")
    return sorted(table[["part", "bucket", "step", "steps", "seed", "strategy", "mode", "verdict"]]
                  .itertuples(index=False, name=None))


def test_replay_writes_every_output(tmp_path):
    trace, out = tmp_path / "t.jsonl", tmp_path / "run"
    made = write_trace(trace)
    result = invoke("replay", trace, *FAST, "--exact-sample", "3", "--out", out)
    assert result.exit_code == 0, result.output
    assert "CPU run" in result.output
    buckets = bucket_steps(read_trace(trace))
    table = pd.read_csv(out / "results.csv")
    assert list(table.columns[:4]) == REPLAY_COLUMNS
    assert len(table) == (sum(len(b.representatives) for b in buckets) + 3) * 2 and set(table["verdict"]) == {"pass"}
    for strategy, group in table.groupby("strategy"):
        bucket_rows = group[group["part"] == "bucket"]
        assert sorted(set(bucket_rows["bucket"])) == [b.index for b in buckets]
        assert bucket_rows["steps"].sum() == pytest.approx(len(made.steps))
        assert sorted(bucket_rows["step"]) == sorted(s for b in buckets for s in b.representatives)
        assert len(group[group["part"] == "sample"]) == 3
    steps = pd.read_csv(out / "buckets.csv")
    assert list(steps["bucket"]) == [next(b.index for b in buckets if i in b.steps) for i in range(len(made.steps))]
    env = json.loads((out / "env.json").read_text())
    assert env["replay"]["buckets"] == len(buckets) and env["replay"]["shape"]["num_heads"] == 2
    assert set(env["replay"]["results"]["eager"]["exact_sample"]) == {"reference unified", "reference split"}
    assert env["sweep"]["command"] == "replay" and env["sweep"]["flags"]["--trace"].startswith("sha256:")
    summary = (out / "summary.md").read_text()
    assert "Bucketing error" in summary and "no verdict" in summary
    written = set(json.loads((out / ".attnbench-files.json").read_text())["written"])
    assert {"results.csv", "buckets.csv", "summary.md", "env.json", "replay_per_step.png", "replay_speedup_cdf.png",
            "replay_kind_share.png"} <= written


def test_flags_override_the_header_shape_and_a_headerless_shape_comes_from_flags(tmp_path):
    trace = tmp_path / "t.jsonl"
    write_trace(trace, Shape())
    out = tmp_path / "run"
    result = invoke("replay", trace, *FAST, "--heads", "4", "--kv-heads", "2", "--dim", "8", "--out", out)
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "results.csv")
    assert set(zip(table["num_heads"], table["num_kv_heads"], table["head_dim"])) == {(4, 2, 8)}


def test_an_interrupted_replay_resumes_to_the_rows_of_a_whole_one(tmp_path, monkeypatch):
    trace, full, out = tmp_path / "t.jsonl", tmp_path / "full", tmp_path / "run"
    write_trace(trace)
    argv = ["replay", trace, *FAST, "--exact-sample", "2"]
    assert invoke(*argv, "--out", full).exit_code == 0
    with monkeypatch.context() as m:
        interrupt_at(m, 3, KeyboardInterrupt())
        result = invoke(*argv, "--out", out)
    assert result.exit_code == 130 and f"--resume {out}" in " ".join(result.output.split())
    assert len(pd.read_csv(out / "results.csv")) == 2 * 2 and (out / "summary.md").exists()
    calls, real = [], sweep.PointRunner.rows
    monkeypatch.setattr(sweep.PointRunner, "rows", lambda self: (calls.append(self.point), (yield from real(self))))
    result = invoke(*argv, "--resume", out)
    assert result.exit_code == 0, result.output
    points = sum(len(b.representatives) for b in bucket_steps(read_trace(trace))) + 2  # representatives, samples
    assert len(calls) == points - 2  # only the points it lacked
    assert keys(out) == keys(full)
    assert (out / "buckets.csv").read_text() == (full / "buckets.csv").read_text()


def test_resume_refuses_another_trace(tmp_path):
    trace, out = tmp_path / "t.jsonl", tmp_path / "run"
    write_trace(trace)
    assert invoke("replay", trace, *FAST, "--out", out).exit_code == 0
    before = (out / "results.csv").read_bytes()
    write_trace(trace, Shape(2, 1, 16, "fp16"))
    result = invoke("replay", trace, *FAST, "--resume", out)
    assert result.exit_code == 1 and "--trace sha256:" in result.output
    assert (out / "results.csv").read_bytes() == before


def test_force_removes_only_what_a_replay_wrote(tmp_path):
    trace, out = tmp_path / "t.jsonl", tmp_path / "run"
    write_trace(trace)
    assert invoke("replay", trace, *FAST, "--out", out).exit_code == 0
    (out / "notes.txt").write_text("mine")
    assert invoke("replay", trace, *FAST, "--out", out).exit_code == 1  # not empty
    result = invoke("replay", trace, *FAST, "--out", out, "--force")
    assert result.exit_code == 0, result.output
    assert (out / "notes.txt").read_text() == "mine" and (out / "summary.md").exists()


def test_every_flag_is_a_field_of_replay_args():
    params = typer.main.get_command(app).commands["replay"].params
    flags = {p.name for p in params}
    assert flags == {f.name for f in dataclasses.fields(ReplayArgs)}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the kernel backends and graph mode")
def test_replay_on_the_gpu_checks_and_times_every_backend_in_graphs(tmp_path):
    trace, out = tmp_path / "t.jsonl", tmp_path / "run"
    write_trace(trace, Shape(8, 2, 128))
    result = invoke("replay", trace, "--mode", "eager,graph", "--budget-ms", "20", "--replicates", "2",
                    "--exact-sample", "4", "--out", out)
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "results.csv")
    assert set(table["mode"]) == {"eager", "graph"} and "fail" not in set(table["verdict"])
    assert (table["verdict"] == "pass").sum() > 0
    env = json.loads((out / "env.json").read_text())
    assert env["replay"]["results"]["graph"]["oracle"] is not None
    assert "saving" in env["replay"]["results"]["graph"]["replicate_ranges"]


def test_shards_split_the_points_and_merge_joins_their_rows(tmp_path):
    trace = tmp_path / "t.jsonl"
    write_trace(trace)
    for i in range(2):
        result = invoke("replay", trace, *FAST, "--exact-sample", "2", "--shard", f"{i}/2", "--out", tmp_path / f"s{i}")
        assert result.exit_code == 0, result.output
    whole = sum(len(b.representatives) for b in bucket_steps(read_trace(trace))) + 2
    parts = [pd.read_csv(tmp_path / f"s{i}" / "results.csv") for i in range(2)]
    assert {len(p) for p in parts} <= {2 * (whole // 2), 2 * (whole - whole // 2)} and sum(map(len, parts)) == 2 * whole
    result = invoke("merge", tmp_path / "s0", tmp_path / "s1", "--out", tmp_path / "m")
    assert result.exit_code == 0, result.output
    merged = pd.read_csv(tmp_path / "m" / "results.csv")
    assert sorted(merged["seed"]) == sorted(pd.concat(parts)["seed"]) and list(merged.columns[:4]) == REPLAY_COLUMNS


def table_cells(lines: list[str]) -> dict[str, list[str]]:
    """A markdown table's rows printed on the console, by first cell."""
    return {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in lines
            if line.startswith("| ") and "---" not in line and not line.startswith("| choice")}


def test_replay_ends_with_its_totals_and_oracle_and_on_the_cpu_no_verdict(tmp_path):
    """The console's closing table holds what env.json's replay.results holds (ea3bb51 ended at `rows:`)."""
    from attnbench.results.replay import read_steps
    from attnbench.results.replay_report import headline

    trace, out = tmp_path / "t.jsonl", tmp_path / "r"
    write_trace(trace)
    result = invoke("replay", trace, *FAST, "--out", out)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    closing = lines[next(i for i, line in enumerate(lines) if line.startswith("rows:")) + 1:-1]
    numbers = json.loads((out / "env.json").read_text())["replay"]["results"]["eager"]
    cells, oracle = table_cells(closing), numbers["oracle"]
    assert closing[0].startswith("eager: one layer's attention summed over the trace (CPU: pipeline demo")
    for choice, total in numbers["totals_ms"].items():
        assert float(cells[choice][0]) == pytest.approx(total, rel=1e-3)
    assert float(cells["per-step oracle"][0]) == pytest.approx(oracle["total_ms"], rel=1e-3)
    assert cells[oracle["best_single"]][1] == "1.000x"
    assert closing[-1].startswith(f"best single choice: {oracle['best_single']}, ")
    assert not any(word in " ".join(closing).lower() for word in ("faster", "slower", "winner", "saves"))
    rows = pd.read_csv(out / "results.csv")
    rows["device"] = "cuda:0"  # the same rows as a GPU's: the oracle's saving is said
    said = headline(rows, read_steps(out))
    saved = said[-1].split("the per-step oracle saves ")[1]
    assert "CPU" not in said[0] and saved.endswith(" % over it")
    assert float(saved.split()[0]) == pytest.approx(oracle["saving_pct"], abs=0.006)
