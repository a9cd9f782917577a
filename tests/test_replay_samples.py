"""Every sample trace in scenarios/traces/ replays: its first steps on the CPU, on a tiny shape, to
the end (summary.md, buckets.csv, the plots), with the CPU run's line naming what it scaled.

Oracle: the trace's own step count and the files a replay run must hold (docs/guides/replay.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bad_input_cli import invoke

SAMPLES = Path(__file__).resolve().parent.parent / "scenarios" / "traces"
TRACES = sorted([*SAMPLES.glob("*[!s].jsonl"), *SAMPLES.glob("*[!s].jsonl.gz")])  # step traces, not *.requests.jsonl


def name(trace: Path) -> str:
    return trace.name.split(".")[0]


def test_the_sample_traces_are_found():
    assert [name(t) for t in TRACES] == ["chat-high", "chat-low", "chat-mid", "decode-heavy", "long-context",
                                         "long-mid", "prefix-heavy", "prefix-low", "spec-decode"]


@pytest.mark.parametrize("trace", TRACES, ids=name)
def test_a_sample_trace_replays_on_the_cpu(trace, tmp_path):
    out = tmp_path / "run"
    result = invoke("replay", trace, "--device", "cpu", "--steps", "6", "--budget-ms", "1", "--exact-sample", "2",
                    "--out", out)
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())  # the console wraps lines
    assert "CPU run:" in said and "--bucket-ratio 4 --budget-ms" not in said and "--heads 4 --kv-heads 1 --dim 32" in said
    env = json.loads((out / "env.json").read_text())
    assert env["replay"]["steps"] == 6 and env["replay"]["trace_steps"] > 6
    assert all(env["replay"]["results"]["eager"]["totals_ms"].values())
    assert "the first 6 of its" in (out / "summary.md").read_text()
    assert (out / "replay_per_step.png").is_file() and len((out / "buckets.csv").read_text().splitlines()) == 7
