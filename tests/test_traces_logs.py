"""Aggregate step logs into step traces (issue 21): SGLang's batch lines and vLLM's iteration lines,
hand-written in the formats each version prints. Every count a line gives is in its step exactly;
the drawn lengths depend on the seed only; every step is marked synthesized and reads back."""

from __future__ import annotations

import json

import pytest
from bad_input_cli import invoke
from hypothesis import assume, given
from hypothesis import strategies as st

from attnbench.traces.jsonl import read_trace
from attnbench.traces.log_steps import apportion

# (line as the engine prints it, expected: decode rows, decode tokens, prefill rows, new tokens,
# cached tokens, KV tokens of the decode rows or None when the line does not say)
SGLANG_LINES = {
    "2024 prefill": ("[2024-12-01 10:00:00 TP0] Prefill batch. #new-seq: 3, #new-token: 1500, #cached-token: 300, "
                     "cache hit rate: 16.67%, token usage: 0.01, #running-req: 5, #queue-req: 0",
                     (0, 0, 3, 1500, 300, None)),
    "2024 decode": ("[2024-12-01 10:00:01 TP0] Decode batch. #running-req: 4, #token: 5000, token usage: 0.02, "
                    "gen throughput (token/s): 120.50, #queue-req: 0", (4, 4, 0, 0, 0, 5000)),
    "mixed chunk": ("[2024-10-02 09:00:00 TP0] Prefill batch(mixed #running-req: 6). #new-seq: 1, #new-token: 512, "
                    "#cached-token: 0, cache hit rate: 0.00%, token usage: 0.10, #running-req: 6, #queue-req: 2",
                    (6, 6, 1, 512, 0, None)),
    "2025 prefill": ("[2025-08-01 21:05:25 TP0 EP0] Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, "
                     "token usage: 0.00, #running-req: 0, #queue-req: 0, ", (0, 0, 1, 7, 0, None)),
    "2025 decode, cuda graph": ("[2025-07-18 15:32:54 TP0] Decode batch. #running-req: 1, #token: 2266, token usage: "
                                "0.00, cuda graph: True, gen throughput (token/s): 3.13, #queue-req: 0, timestamp: "
                                "2025-07-18T15:32:54.159394", (1, 1, 0, 0, 0, 2266)),
    "comma and iteration": ("[2026-03-01 08:00:00 TP0] Prefill batch [1204], #new-seq: 2, #new-token: 4096, "
                            "#cached-token: 1024, token usage: 0.30, #running-req: 17, #queue-req: 4, #pending-token: 0, "
                            "cuda graph: False, input throughput (token/s): 9000.00", (0, 0, 2, 4096, 1024, None)),
    "new decode": ("[2026-03-01 08:00:01 TP0] Decode batch [1244], #running-req: 19, #cached-token: 0, #token: 40000, "
                   "token usage: 0.31, cuda graph: True, gen throughput (token/s): 1500.00, #queue-req: 4",
                   (19, 19, 0, 0, 0, 40000)),
    "hybrid decode": ("[2025-09-01 12:00:00 TP0] Decode batch. #running-req: 2, #full token: 3000, full token usage: "
                      "0.01, #swa token: 800, swa token usage: 0.00, cuda graph: True, gen throughput (token/s): 50.00, "
                      "#queue-req: 0, ", (2, 2, 0, 0, 0, 3000)),
    "speculative decode": ("[2025-09-01 12:00:00 TP0] Decode batch. #running-req: 8, #token: 9000, token usage: 0.04, "
                           "accept len: 2.31, accept rate: 0.58, cuda graph: True, gen throughput (token/s): 700.00, "
                           "#queue-req: 0, ", (8, 8, 0, 0, 0, 9000)),
}
VLLM_LINES = {
    "core.py": ("INFO 06-10 14:00:00 [core.py:250] Iteration(17): 2 context requests, 1000 context tokens, 30 "
                "generation requests, 30 generation tokens, iteration elapsed time: 25.10 ms", (30, 30, 2, 1000, 0, None)),
    "loggers.py": ("(EngineCore_DP0 pid=1) INFO 10-08 13:00:00 [loggers.py:182] Engine 000: Iteration(18): 0 context "
                   "requests, 0 context tokens, 31 generation requests, 31 generation tokens, iteration elapsed time: "
                   "9.80 ms, GPU KV cache usage: 3.1%", (31, 31, 0, 0, 0, None)),
    "speculative": ("INFO 06-10 14:00:01 [core.py:250] Iteration(19): 1 context requests, 512 context tokens, 10 "
                    "generation requests, 40 generation tokens, iteration elapsed time: 30.00 ms", (10, 40, 1, 512, 0, None)),
}
NOISE = ['[2025-07-18 15:32:53] INFO:     127.0.0.1:57722 - "POST /generate HTTP/1.1" 200 OK',
         "INFO 06-10 14:00:02 [loggers.py:123] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation "
         "throughput: 90.0 tokens/s, Running: 30 reqs, Waiting: 0 reqs, GPU KV cache usage: 3.0%"]


def convert(tmp_path, flag, lines, *extra):
    log, out = tmp_path / "server.log", tmp_path / "out.jsonl"
    log.write_text("\n".join(lines) + "\n")
    result = invoke("trace", "convert", flag, log, "--out", out, "--force", *extra)
    assert result.exit_code == 0, result.output
    return read_trace(out), out, " ".join(result.output.split())  # the console wraps at 80 columns


def counts(step) -> tuple:
    decode = [r for r in step.requests if r.query_len == 1 + r.num_draft_tokens and not r.prefix_hit
              and r.kv_len > r.query_len]
    prefill = step.requests[len(decode):]
    return (len(decode), sum(r.query_len for r in decode), len(prefill), sum(r.query_len for r in prefill),
            sum(r.prefix_hit for r in prefill), sum(r.kv_len for r in decode))


@pytest.mark.parametrize("flag,lines", [("--sglang-log", SGLANG_LINES), ("--vllm-log", VLLM_LINES)],
                         ids=["sglang", "vllm"])
def test_every_count_of_every_line_format_is_kept(tmp_path, flag, lines):
    trace, _, output = convert(tmp_path, flag, [*NOISE, *(text for text, _ in lines.values())])
    assert len(trace.steps) == len(lines)
    for step, (name, (_, want)) in zip(trace.steps, lines.items()):
        got = counts(step)
        assert got[:5] == want[:5], name
        if want[5] is not None:
            assert got[5] == want[5], name
        assert all(r.kv_len == r.query_len + r.prefix_hit for r in step.requests[want[0]:]), name
    assert f"{len(NOISE)} of {len(NOISE) + len(lines)} log lines ignored" in output


def test_a_speculative_iteration_verifies_the_same_drafts_on_every_row(tmp_path):
    trace, _, _ = convert(tmp_path, "--vllm-log", [VLLM_LINES["speculative"][0]])
    decode = trace.steps[0].requests[:10]
    assert {(r.query_len, r.num_draft_tokens) for r in decode} == {(4, 3)}


def test_the_same_seed_gives_the_same_trace_and_another_only_other_lengths(tmp_path):
    lines = [text for text, _ in SGLANG_LINES.values()]
    _, out, _ = convert(tmp_path, "--sglang-log", lines, "--seed", "7")
    first = out.read_bytes()
    _, out, _ = convert(tmp_path, "--sglang-log", lines, "--seed", "7")
    assert out.read_bytes() == first
    other, out, _ = convert(tmp_path, "--sglang-log", lines, "--seed", "8")
    assert out.read_bytes() != first
    again = read_trace(tmp_path / "out.jsonl")
    assert [counts(s)[:5] for s in other.steps] == [counts(s)[:5] for s in again.steps]


def test_every_step_is_marked_synthesized_and_reads_back(tmp_path):
    trace, out, _ = convert(tmp_path, "--vllm-log", [text for text, _ in VLLM_LINES.values()],
                            "--log-kv-len", "uniform:100:200", "--log-input-len", "300")
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["version"] == 2 and lines[0]["synthesized"] is True
    assert lines[0]["generator"]["lengths"] == {"input_len": "300", "kv_len": "uniform:100:200", "seed": 0}
    assert all(line["synthesized"] is True for line in lines[1:])
    assert all(step.synthesized for step in trace.steps)
    assert all(100 <= r.kv_len <= 200 for r in trace.steps[1].requests)
    summary = invoke("trace", "summary", out)
    assert "steps marked synthesized (counts read, lengths drawn): 3 of 3" in " ".join(summary.output.split())
    result = invoke("trace", "convert", "--steps", out, "--out", tmp_path / "again.jsonl")
    assert result.exit_code == 0, result.output
    assert read_trace(tmp_path / "again.jsonl") == trace


def test_a_version_1_trace_reads_as_before_and_is_written_as_version_1(tmp_path):
    v1 = tmp_path / "v1.jsonl"
    v1.write_text('{"format": "attnbench-step-trace", "version": 1, "source": "old"}\n'
                  '{"query_len": [1, 8], "kv_len": [9, 8]}\n')
    assert not read_trace(v1).steps[0].synthesized
    result = invoke("trace", "convert", "--steps", v1, "--out", tmp_path / "o.jsonl")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "o.jsonl").read_text().splitlines()[0])["version"] == 1


def test_dummy_and_empty_steps_are_skipped_and_counted(tmp_path):
    dummy = ("INFO 06-10 14:00:00 [core.py:250] Iteration(3): 0 context requests, 0 context tokens, 0 generation "
             "requests, 0 generation tokens, iteration elapsed time: 0.00 ms (dummy)")
    trace, _, output = convert(tmp_path, "--vllm-log", [dummy, VLLM_LINES["core.py"][0]])
    assert len(trace.steps) == 1 and "1 steps without a request skipped" in output


@given(total=st.integers(0, 10_000), weights=st.lists(st.integers(1, 5000), min_size=1, max_size=40),
       floor=st.integers(0, 3), cap=st.integers(3, 2000))
def test_apportion_keeps_the_total_within_each_rows_bounds(total, weights, floor, cap):
    n = len(weights)
    low, high = [floor] * n, [cap] * n
    assume(floor * n <= total <= cap * n)
    shares = apportion(total, weights, low, high, "x")
    assert sum(shares) == total and all(floor <= s <= cap for s in shares)
