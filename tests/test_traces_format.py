"""The step trace format (attnbench/traces): what a line means, round trips, and the kernels' Batch.

Oracles: files written here by hand from the documented format (docs/guides/traces.md), and the
Batch contract that metadata.split_batch relies on (decode rows first, one decode query length).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbench.kernels.metadata import split_batch
from attnbench.traces.jsonl import read_trace, trace_text
from attnbench.traces.steps import FORMAT, VERSION, Header, Request, Shape, Trace, TraceStep

HEADER = {"format": FORMAT, "version": VERSION, "source": "hand-written", "shape": {"num_heads": 32,
          "num_kv_heads": 8, "head_dim": 128, "dtype": "bf16", "block_size": 16}, "synthesized": False,
          "generator": {}}


def write(tmp_path, *lines, name="t.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_a_hand_written_trace_reads_as_documented(tmp_path):
    path = write(tmp_path, HEADER,
                 {"query_len": [1, 1, 512], "kv_len": [800, 33, 1536], "chunked": [False, False, True]},
                 {"query_len": [4, 100], "kv_len": [900, 1124], "num_draft_tokens": [3, 0], "prefix_hit": [0, 1000]})
    trace = read_trace(path)
    assert trace.header.shape == Shape(32, 8, 128, "bfloat16", 16)
    assert trace.steps[0].requests == (Request(1, 800), Request(1, 33), Request(512, 1536, chunked=True))
    assert trace.steps[1].requests[0] == Request(4, 900, num_draft_tokens=3)
    assert trace.steps[1].requests[1].prefix_hit == 1000
    assert [s.kind for s in trace.steps] == ["mixed", "mixed"]


def test_step_kinds():
    assert TraceStep((Request(1, 10), Request(1, 20))).kind == "decode"
    assert TraceStep((Request(4, 10, num_draft_tokens=3),)).kind == "decode"
    assert TraceStep((Request(100, 100), Request(7, 70, chunked=True))).kind == "prefill"
    assert TraceStep((Request(1, 10), Request(100, 100))).kind == "mixed"
    assert TraceStep((Request(1, 1, chunked=True),)).kind == "prefill"  # the last token of a chunked prompt


def test_batch_puts_decode_rows_first_with_one_query_length():
    step = TraceStep((Request(300, 300), Request(1, 50), Request(3, 60, num_draft_tokens=2), Request(1, 70)))
    batch = step.batch(rule="r")
    assert batch.query_lens == (1, 1, 300, 3) and batch.kv_lens == (50, 70, 300, 60)
    assert batch.is_decode == (True, True, False, False)
    decode, prefill = split_batch(batch)
    assert decode == [0, 1] and prefill == [2, 3]
    assert batch.rule == "r"


def test_default_columns_are_left_out_and_read_back(tmp_path):
    trace = Trace(Header("x"), (TraceStep((Request(1, 5), Request(2, 2))),))
    lines = trace_text(trace).splitlines()
    assert json.loads(lines[1]) == {"query_len": [1, 2], "kv_len": [5, 2]}
    path = tmp_path / "t.jsonl"
    path.write_text(trace_text(trace))
    assert read_trace(path) == trace


def test_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n" + json.dumps(HEADER) + "\n\n" + json.dumps({"query_len": [1], "kv_len": [2]}) + "\n\n")
    assert len(read_trace(path).steps) == 1


@st.composite
def requests(draw):
    query_len = draw(st.integers(1, 4096))
    kv_len = draw(st.integers(query_len, query_len + 100_000))
    return Request(query_len, kv_len, num_draft_tokens=draw(st.integers(0, query_len - 1)),
                   chunked=draw(st.booleans()), prefix_hit=draw(st.integers(0, kv_len - query_len)))


shapes = st.builds(Shape, st.sampled_from([None, 8, 32]), st.sampled_from([None, 8]), st.sampled_from([None, 64, 128]),
                   st.sampled_from([None, "bfloat16", "float16"]), st.sampled_from([None, 16, 32]))
traces = st.builds(Trace, st.builds(Header, st.text(max_size=30), shapes, st.booleans(),
                                    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3)),
                   st.lists(st.builds(TraceStep, st.lists(requests(), min_size=1, max_size=20).map(tuple)),
                            min_size=1, max_size=10).map(tuple))


@settings(max_examples=60, deadline=None)
@given(trace=traces)
def test_any_trace_round_trips(tmp_path_factory, trace):
    path = tmp_path_factory.mktemp("rt") / "t.jsonl"
    path.write_text(trace_text(trace))
    assert read_trace(path) == trace
    assert trace_text(read_trace(path)) == trace_text(trace)


@settings(max_examples=60, deadline=None)
@given(step=st.builds(TraceStep, st.lists(requests(), min_size=1, max_size=30).map(tuple)))
def test_batch_keeps_every_row_once_and_decode_rows_share_a_query_length(step):
    batch = step.batch()
    rows = sorted(zip(batch.query_lens, batch.kv_lens))
    assert rows == sorted((r.query_len, r.kv_len) for r in step.requests)
    decode = [q for q, d in zip(batch.query_lens, batch.is_decode) if d]
    assert len(set(decode)) <= 1
    assert list(batch.is_decode) == sorted(batch.is_decode, reverse=True)  # decode rows first


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "bfloat16", "float16"])
def test_dtype_aliases_are_stored_by_their_full_name(dtype):
    assert Shape(dtype=dtype).dtype in ("bfloat16", "float16")
