"""Readers into the step trace: batch-shapes files, vLLM's --case strings and batch specs, request traces
(timed JSON Lines, BurstGPT CSV) and the synthetic generator, each on text written here by hand from
the grammars the module docstrings cite."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbench.traces.requests import LengthDist, TimedRequest, read_burstgpt, read_timed, synthesize, timed_text
from attnbench.traces.steps import Request as R
from attnbench.traces.vllm_shapes import parse_batch_spec, parse_case, read_shapes

SHAPES = {"cases": [
    {"name": "decode", "requests": [{"query_len": 1, "kv_len": 2048, "count": 3}]},
    {"name": "mixed", "requests": [{"query_len": 1, "kv_len": 100, "count": 2},
                                   {"query_len": 512, "kv_len": 1536, "chunked": True},
                                   {"query_len": 4, "kv_len": 60, "num_draft_tokens": 3}]},
    {"name": "prefill", "requests": [{"query_len": 64}]},
    {"name": "hit", "requests": [{"query_len": 64, "kv_len": 192, "prefix_hit": 128}]},
]}


def test_batch_specs_read_as_vllm_documents_them():
    assert parse_batch_spec("q2k").requests == (R(2048, 2048),)
    assert parse_batch_spec("2q2k_32q1kv1k").requests == (R(2048, 2048),) * 2 + (R(1, 1024),) * 32
    assert parse_batch_spec("16q4kv1k").requests == (R(4, 1024),) * 16
    assert parse_batch_spec("8q1s1k").requests == (R(1, 1024),) * 8  # the newer `s<seq_len>` spelling
    assert parse_batch_spec("q4s1k").requests == (R(4, 1024),)
    assert parse_batch_spec("q100kv300").requests == (R(100, 300),)


def test_cases_read_as_the_grammar_says():
    name, step = parse_case("mix=32*1@2048,512@1024c,4@100:3")
    assert name == "mix"
    assert step.requests == (R(1, 2048),) * 32 + (R(512, 1024, chunked=True), R(4, 100, num_draft_tokens=3))
    assert parse_case("p=128")[1].requests == (R(128, 128),)


def test_cases_read_as_vllm_bench_forward_documents_them():
    """`vllm bench forward --help`: K counts the query; a prefill's prefix is a prefix-cache hit
    unless `c` marks a chunk; D drafts are among the Q (verify=16*4@4096:3)."""
    assert parse_case("hit=2048@10240")[1].requests == (R(2048, 10240, prefix_hit=8192),)
    assert parse_case("chunk=2048@10240c")[1].requests == (R(2048, 10240, chunked=True),)
    assert parse_case("verify=16*4@4096:3")[1].requests == (R(4, 4096, num_draft_tokens=3),) * 16
    assert parse_case("decode=32*1@8192")[1].requests == (R(1, 8192),) * 32
    assert parse_case("mix=8192,32*1@8192")[1].requests == (R(8192, 8192),) + (R(1, 8192),) * 32


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_batch_shapes_file_is_one_step_per_case(tmp_path, suffix):
    path = tmp_path / f"shapes{suffix}"
    if suffix == ".yaml":
        yaml = pytest.importorskip("yaml", reason="pyyaml is not installed: YAML shapes files are refused")
        path.write_text(yaml.safe_dump(SHAPES))
    else:
        path.write_text(json.dumps(SHAPES))
    named = read_shapes(path)
    assert [name for name, _ in named] == ["decode", "mixed", "prefill", "hit"]
    assert named[0][1].requests == (R(1, 2048),) * 3
    assert named[1][1].requests == (R(1, 100), R(1, 100), R(512, 1536, chunked=True), R(4, 60, num_draft_tokens=3))
    assert named[2][1].requests == (R(64, 64),)
    assert named[3][1].requests == (R(64, 192, prefix_hit=128),)
    assert [step.kind for _, step in named] == ["decode", "mixed", "prefill", "prefill"]


def test_a_timed_trace_reads_in_arrival_order_from_zero(tmp_path):
    path = tmp_path / "t.jsonl"
    lines = [{"timestamp": 7.5, "input_length": 10, "output_length": 3, "hash_ids": [1, 2]},
             {"timestamp": 5, "input_length": 20, "output_length": 1, "prefix_length": 16}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert read_timed(path) == [TimedRequest(0.0, 20, 1, 16), TimedRequest(2.5, 10, 3)]
    assert read_timed(path, "ms") == [TimedRequest(0.0, 20, 1, 16), TimedRequest(0.0025, 10, 3)]


def test_a_burstgpt_csv_skips_failed_requests_and_counts_them(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "5,ChatGPT,472,18,490,Conversation log\n"
                    "8,GPT-4,1000,0,1000,Conversation log\n"
                    "9.5,ChatGPT,30.0,200,230,API log\n")
    requests, skipped = read_burstgpt(path)
    assert requests == [TimedRequest(0.0, 472, 18), TimedRequest(4.5, 30, 200)] and skipped == 1


@settings(max_examples=40, deadline=None)
@given(st.lists(st.builds(TimedRequest, st.floats(0, 1e4).map(lambda t: round(t, 3)), st.integers(1, 9000),
                          st.integers(1, 9000), st.just(0)), min_size=1, max_size=20))
def test_timed_traces_round_trip(tmp_path_factory, requests):
    path = tmp_path_factory.mktemp("rt") / "r.jsonl"
    path.write_text(timed_text(requests))
    start = min(r.arrival for r in requests)
    expected = sorted((TimedRequest(r.arrival - start, r.input_len, r.output_len) for r in requests),
                      key=lambda r: r.arrival)
    assert [(round(r.arrival, 6), r.input_len, r.output_len) for r in read_timed(path)] == \
        [(round(r.arrival, 6), r.input_len, r.output_len) for r in expected]


def test_length_distributions():
    rng = random.Random(0)
    assert LengthDist.parse("77", "--x").draw(rng) == 77
    uniform = LengthDist.parse("uniform:10:20", "--x")
    assert all(10 <= uniform.draw(rng) <= 20 for _ in range(200))
    lognormal = LengthDist.parse("lognormal:600:0.5", "--x")
    draws = sorted(lognormal.draw(rng) for _ in range(2001))
    assert 500 < draws[1000] < 720  # the median is MEDIAN
    assert str(lognormal) == "lognormal:600:0.5" and str(uniform) == "uniform:10:20"


def test_synthesize_is_seeded_poisson_and_shares_a_prefix():
    dist = LengthDist.parse("uniform:100:200", "--x")
    first = synthesize(2000, 10.0, dist, dist, prefix_len=64, prefix_share=0.5, seed=3)
    assert first == synthesize(2000, 10.0, dist, dist, prefix_len=64, prefix_share=0.5, seed=3)
    assert first != synthesize(2000, 10.0, dist, dist, prefix_len=64, prefix_share=0.5, seed=4)
    gaps = [b.arrival - a.arrival for a, b in zip(first, first[1:])]
    assert 0.09 < sum(gaps) / len(gaps) < 0.11  # mean gap 1 / rate
    assert 0.45 < sum(r.prefix_len == 64 for r in first) / len(first) < 0.55
    assert all(r.arrival == 0 for r in synthesize(5, 0.0, dist, dist))  # rate 0: all at once
