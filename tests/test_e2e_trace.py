"""`attnbench e2e --trace`: the engine serving a request stream, and vllm bench serve's metrics of it.

Oracles: a fake clock on which every engine step takes one second, so each token's time, and from
them TTFT, TPOT, ITL, E2EL and throughput, are computed by hand below; numpy-free percentiles
written out from their definition (linear interpolation between order statistics).
"""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from gpu_e2e import backend_params

from attnbench.e2e.agreement import compare_generations
from attnbench.e2e.model import ModelArgs
from attnbench.e2e.runner import ModelSpec
from attnbench.e2e.serve_metrics import request_row, spread, summarize
from attnbench.e2e.serving import serve, trace_prompts


class StepClock:
    """Each read returns the time, then moves it one second on (the serve loop reads once per
    step, after it); a wait moves it to the time waited for. `waits` records each wait's target."""

    def __init__(self):
        self.t, self.waits = 0.0, []

    def now(self) -> float:
        self.t += 1.0
        return self.t - 1.0

    def wait_until(self, t: float) -> None:
        self.waits.append(t)
        self.t = max(self.t, t)


@pytest.fixture(scope="module")
def engines():
    spec = ModelSpec(ModelArgs.from_name("tiny"), None, "bfloat16", torch.device("cpu"), 0, 2, 64, 16, None)
    return spec.build()


def served(engines, arrivals, lens, outs, strategy="unified", max_num_seqs=2, clock=None, **kw):
    engine = engines.engine("reference", strategy)
    engine.max_num_seqs = max_num_seqs
    try:
        return serve(engine, arrivals, trace_prompts(lens, 1024), outs, clock or StepClock(), **kw)
    finally:
        engine.max_num_seqs = 2


def test_ttft_tpot_itl_e2el_and_throughput_by_hand(engines):
    # A arrives at 0 (8 prompt tokens, 3 out); B at 2.5 (4 prompt tokens, 2 out). Steps end at
    # 1 (A's prefill), 2, 3 (A's decodes; A done); B joins at the next step: 4 (prefill), 5.
    run = served(engines, [0.0, 2.5], [8, 4], [3, 2])
    assert [r.token_times for r in run.requests] == [(1.0, 2.0, 3.0), (4.0, 5.0)]
    assert run.duration_s == 5.0
    rows = [request_row(i, r) for i, r in enumerate(run.requests)]
    assert [(r["ttft_ms"], r["tpot_ms"], r["e2el_ms"]) for r in rows] == [(1000, 1000, 3000), (1500, 1000, 2500)]
    m = summarize(run)
    assert (m.requests, m.request_throughput, m.output_throughput, m.total_token_throughput) == (2, 0.4, 1.0, 3.4)
    assert (m.ttft_mean_ms, m.ttft_p50_ms, m.ttft_p90_ms) == pytest.approx((1250, 1250, 1450))
    assert m.ttft_p99_ms == pytest.approx(1495)
    assert (m.tpot_p50_ms, m.itl_mean_ms, m.itl_p99_ms) == (1000, 1000, 1000)
    assert (m.e2el_mean_ms, m.e2el_p90_ms, m.e2el_p99_ms) == pytest.approx((2750, 2950, 2995))


def test_an_idle_engine_waits_for_the_next_arrival_and_not_past_it(engines):
    clock = StepClock()
    run = served(engines, [0.0, 10.0], [4, 4], [1, 2], clock=clock)
    assert clock.waits == [10.0]  # start was read at 0: the wait ends exactly at the arrival
    assert run.requests[1].token_times == (11.0, 12.0)
    assert request_row(1, run.requests[1])["ttft_ms"] == 1000


@pytest.mark.parametrize("arrivals", [[0.0, 0.0, 0.0], [0.0, 0.3, 7.0], [1.5, 1.6, 1.7], [0.0, 4.0, 4.0]])
def test_no_request_gets_a_token_before_it_arrives(engines, arrivals):
    run = served(engines, arrivals, [5, 9, 3], [3, 2, 4])
    for r in run.requests:
        assert r.token_times[0] > r.arrival and list(r.token_times) == sorted(r.token_times)


def test_arrivals_are_honoured_on_the_wall_clock(engines):
    """The real clock: the later request's first token comes after its arrival, however slow the host."""
    run = serve(engines.engine("reference", "unified"), [0.0, 0.3], trace_prompts([4, 4], 1024), [1, 2])
    assert run.requests[1].token_times[0] >= 0.3 <= run.duration_s


def test_all_at_once_prefills_every_request_in_the_first_step(engines):
    run = served(engines, [0.0, 0.0], [6, 3], [2, 3])
    assert [r.token_times[0] for r in run.requests] == [1.0, 1.0]


def test_max_num_seqs_makes_later_requests_wait(engines):
    run = served(engines, [0.0, 0.0], [6, 3], [2, 3], max_num_seqs=1)
    assert [r.token_times for r in run.requests] == [(1.0, 2.0), (3.0, 4.0, 5.0)]
    assert request_row(1, run.requests[1])["ttft_ms"] == 3000  # queueing counts, as a client sees it


def test_tokens_are_the_same_however_requests_arrive(engines):
    """Greedy tokens depend on the prompt alone (float32 reference attention on the CPU)."""
    together = served(engines, [0.0, 0.0], [6, 3], [3, 3])
    apart = served(engines, [0.0, 5.0], [6, 3], [3, 3])
    assert together.tokens == apart.tokens


def percentile(values, q):
    """Linear interpolation between order statistics, written from its definition."""
    xs = sorted(values)
    rank = q / 100 * (len(xs) - 1)
    low = math.floor(rank)
    return xs[low] + (xs[min(low + 1, len(xs) - 1)] - xs[low]) * (rank - low)


@pytest.mark.parametrize("values", [[1.0, 2.0, 3.0, 4.0], [5.0], [3.0, 1.0, 2.0], [0.5, 9.0, 2.0, 2.0, 7.5, 1.0]])
def test_each_percentile_is_linear_interpolation(values):
    got = spread(values, "x")
    assert got["x_mean_ms"] == pytest.approx(sum(values) / len(values))
    for q in (50, 90, 99):
        assert got[f"x_p{q}_ms"] == pytest.approx(percentile(values, q))


def test_tpot_leaves_out_single_token_requests_and_empty_spreads_are_blank(engines):
    run = served(engines, [0.0, 0.0], [4, 4], [1, 3])
    assert math.isnan(request_row(0, run.requests[0])["tpot_ms"])
    assert summarize(run).tpot_p50_ms == 1000  # the 3-token request alone
    assert math.isnan(spread([], "x")["x_p50_ms"]) and math.isnan(spread([math.nan], "x")["x_mean_ms"])


def test_agreement_reads_requests_of_different_lengths():
    logits = [torch.randn(2, 5), torch.randn(4, 5)]
    tokens = [row.argmax(-1).tolist() for row in logits]
    assert compare_generations(tokens, logits, tokens, logits).verdict == "match"
    other = [list(tokens[0]), list(tokens[1])]
    other[1][2] = (other[1][2] + 1) % 5
    result = compare_generations(tokens, logits, other, [x.clone() for x in logits])
    assert (result.first_divergence, result.diverged_requests) == ("request 1 step 2", 1)
    assert result.tokens_equal == pytest.approx(5 / 6)


def test_logits_recorded_per_request_match_the_tokens(engines):
    run = served(engines, [0.0, 0.5], [6, 3], [2, 4], record_logits=True)
    assert [tuple(x.shape) for x in run.logits] == [(2, 1024), (4, 1024)]
    assert [x.float().argmax(-1).tolist() for x in run.logits] == run.tokens


def test_the_command_writes_every_file(tmp_path):
    import pandas as pd
    from bad_input_cli import invoke

    trace = tmp_path / "t.requests.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": i, "output_length": o}) + "\n"
                             for t, i, o in [(0.0, 100, 12), (0.05, 5, 2), (0.1, 6, 2)]))
    out = tmp_path / "run"
    result = invoke("e2e", "--trace", trace, "--device", "cpu", "--out", out)
    assert result.exit_code == 0, result.output
    assert "CPU run:" in result.stdout and "--max-requests 1" in result.stdout
    assert "cut to at most 64 prompt and 8 output tokens" in result.stdout  # the demo's default stays quick
    assert_plan_and_eta(result.stdout, serves=4)
    for name in ("trace.csv", "requests.csv", "results.csv", "agreement.csv", "summary.md", "env.json",
                 "trace_latency.png", "trace_metrics.png"):
        assert (out / name).is_file(), name
    env = json.loads((out / "env.json").read_text())
    assert env["trace"]["requests_in_file"] == 3 and env["trace"]["requests_served"] == 1
    assert env["trace"]["cpu_demo_cut_to"] == {"prompt_tokens": 64, "output_tokens": 8}
    assert set(pd.read_csv(out / "requests.csv")["output_len"]) == {8}
    assert env["trace"]["arrivals"] == "trace" and len(env["trace"]["sha256"]) == 64 and env["e2e"]["serves"] == 2
    lines = (out / "requests.csv").read_text().splitlines()
    assert len(lines) == 1 + 2 * 2  # reference unified and split, 2 serves each, of the 1 request
    serves = pd.read_csv(out / "trace.csv")
    assert sorted(zip(serves["strategy"], serves["serve"])) == [("split", 1), ("split", 2), ("unified", 1),
                                                                ("unified", 2)]
    assert (serves["graphs_captured_while_serving"] == 0).all() and (serves["verdict"] == "pass").all()
    summary = (out / "summary.md").read_text()
    assert "split faster" not in summary and "split slower" not in summary and "during the 4 timed serves: 0" in summary


def assert_plan_and_eta(stdout: str, serves: int) -> None:
    """The count of serves and an ETA before the first serve, an ETA after each, 0 s after the last
    (ea3bb51 printed neither: 184 s of serves without a word of how long)."""
    lines = stdout.splitlines()
    said = [i for i, line in enumerate(lines) if re.search(r" (check serve[^,;]*|serve \d+): \d", line)]
    assert any(line.startswith(f"{serves} serves in all; ETA after the first serve") for line in lines[:said[0]])
    assert sum(bool(re.search(r" serve \d+: ", lines[i])) for i in said) == serves
    eta = r"; ETA (\d+ s|\d+ min \d\d s|\d+ h \d+ min)( \(from 1 serve; refined after each\))?$"
    assert all(re.search(eta, lines[i]) for i in said), [lines[i] for i in said]
    assert lines[said[-1]].endswith("; ETA 0 s")


def test_requests_given_by_max_requests_are_served_uncut_with_an_eta(tmp_path):
    import pandas as pd
    from bad_input_cli import invoke

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": 70, "output_length": 9}) + "\n"
                             for t in (0.0, 0.01)))
    out = tmp_path / "run"
    result = invoke("e2e", "--trace", trace, "--device", "cpu", "--max-requests", "2", "--strategy", "unified",
                    "--out", out)
    assert result.exit_code == 0, result.output
    assert "cut to" not in result.stdout and "cpu_demo_cut_to" not in (out / "env.json").read_text()
    assert set(pd.read_csv(out / "requests.csv")["output_len"]) == {9}
    assert_plan_and_eta(result.stdout, serves=2)


def test_millisecond_timestamps_are_read_as_such(tmp_path):
    from attnbench.runs.e2e_trace import read_trace

    trace = tmp_path / "m.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": 4, "output_length": 2}) + "\n"
                             for t in (1000, 1250, 3000)))
    read = read_trace(trace, 2, "ms")
    assert [r.arrival for r in read.requests] == [0.0, 0.25] and read.in_file == 3
    assert read.format.endswith("(ms)")


def test_all_at_once_and_a_burstgpt_csv(tmp_path):
    import pandas as pd
    from bad_input_cli import invoke

    trace = tmp_path / "b.csv"
    trace.write_text("Timestamp,Model,Request tokens,Response tokens\n0,x,7,2\n3,x,5,0\n9,x,4,3\n")
    out = tmp_path / "run"
    result = invoke("e2e", "--trace", trace, "--device", "cpu", "--arrivals", "all-at-once", "--strategy", "unified",
                    "--max-requests", "2", "--out", out)
    assert result.exit_code == 0, result.output
    requests = pd.read_csv(out / "requests.csv")
    requests = requests[requests["serve"] == 1]
    assert list(requests["arrival_s"]) == [0.0, 0.0] and list(requests["output_len"]) == [2, 3]
    env = json.loads((out / "env.json").read_text())
    assert env["trace"]["format"] == "BurstGPT CSV" and env["trace"]["skipped_no_response"] == 1


def test_ctrl_c_keeps_what_was_served(tmp_path, monkeypatch):
    import pandas as pd
    from bad_input_cli import invoke

    from attnbench.runs import e2e_trace_serves

    calls = []

    def serve_then_stop(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # on the CPU each check serve is serve 1: round 2's first serve (split) is interrupted
            raise KeyboardInterrupt
        return serve(*args, **kwargs)

    monkeypatch.setattr(e2e_trace_serves, "serve", serve_then_stop)
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 5, "output_length": 2}) + "\n")
    out = tmp_path / "run"
    result = invoke("e2e", "--trace", trace, "--device", "cpu", "--out", out)
    assert result.exit_code == 130 and "interrupted by SIGINT after 2 of 4 measured serves" in result.stderr
    assert list(pd.read_csv(out / "trace.csv")["strategy"]) == ["unified", "split"]
    assert (out / "requests.csv").is_file() and (out / "summary.md").is_file()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU serving needs CUDA")
@pytest.mark.parametrize("backend", backend_params("vllm-fa2", "vllm-fa3", "flashinfer"))
@pytest.mark.parametrize("cudagraph", ["full", "piecewise"])
def test_gpu_trace_serves_under_graphs_with_strategies_agreeing(backend, cudagraph, tmp_path):
    """The tiny model serves a small trace in 8-token chunks under CUDA graphs: every row passes,
    split agrees with unified (no MISMATCH), and every graph was captured before the measured serves."""
    import pandas as pd
    from bad_input_cli import invoke

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": i, "output_length": o}) + "\n"
                             for t, i, o in [(0.0, 24, 6), (0.01, 9, 8), (0.02, 40, 3), (0.2, 17, 5)]))
    out = tmp_path / "run"
    result = invoke("e2e", "--model", "tiny", "--trace", trace, "--backend", backend, "--cudagraph", cudagraph,
                    "--chunk-size", "8", "--out", out)
    assert result.exit_code == 0, result.output
    rows = pd.read_csv(out / "trace.csv")
    assert set(rows["verdict"]) == {"pass"} and set(rows["requests"]) == {4} and set(rows["serve"]) == {1, 2, 3}
    assert (rows["graphs_captured_while_serving"] == 0).all() and (rows["graphs_before_timing"] > 0).all()
    assert set(pd.read_csv(out / "agreement.csv")["verdict"]) <= {"match", "near-tie"}
    requests = pd.read_csv(out / "requests.csv")
    assert (requests["ttft_ms"] > 0).all() and (requests["output_len"] == [6, 8, 3, 5] * len(rows)).all()
