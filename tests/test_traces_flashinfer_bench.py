"""flashinfer-bench workloads (traces/flashinfer_bench.py): files written here by hand as its dataset
lays them out (a Trace line per workload, index tensors in safetensors at paths relative to the root),
read into steps with the lengths its definitions' references compute; a step trace written as
workloads and read back; and bad workloads refused in one line naming the file, line and input."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from bad_input_cli import assert_one_error_line, invoke
from bad_results import snapshot
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

from attnbench.runs.trace import write_flashinfer_bench
from attnbench.traces.flashinfer_bench import read_workloads
from attnbench.traces.jsonl import read_trace
from attnbench.traces.steps import Header, Shape, Trace, TraceStep
from attnbench.traces.steps import Request as R

DECODE, PREFILL = "gqa_paged_decode_h32_kv8_d128_ps64", "gqa_paged_prefill_causal_h32_kv4_d128_ps1"


def dataset(tmp_path, definition, tensors, inputs=None, uuid="w0"):
    """One workload of `definition` under tmp_path/fib as flashinfer-trace lays it out (`inputs`
    replaces the index inputs it names)."""
    root = tmp_path / "fib"
    blob = f"blob/workloads/gqa_paged/{definition}/{uuid}.safetensors"
    (root / blob).parent.mkdir(parents=True, exist_ok=True)
    save_file({k: np.asarray(v, dtype=np.int32) for k, v in tensors.items()}, str(root / blob))
    spec = {**{k: {"type": "safetensors", "path": blob, "tensor_key": k} for k in tensors}, **(inputs or {})}
    line = {"definition": definition, "workload": {"uuid": uuid, "axes": {}, "inputs": {"q": {"type": "random"}, **spec}},
            "solution": None, "evaluation": None}
    path = root / "workloads" / "gqa_paged" / f"{definition}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
    return path


def test_a_prefill_workload_reads_as_its_reference_computes(tmp_path):
    # flashinfer-bench's own test batch: two requests of 3 and 2 query tokens on 4 and 3 keys (page size 1)
    path = dataset(tmp_path, PREFILL, {"qo_indptr": [0, 3, 5], "kv_indptr": [0, 4, 7], "kv_indices": range(7)})
    shape, named, skipped = read_workloads(path)
    assert (shape.num_heads, shape.num_kv_heads, shape.head_dim, shape.block_size) == (32, 4, 128, 1)
    assert named == [("w0", named[0][1])] and named[0][1].requests == (R(3, 4), R(2, 3)) and skipped == 0


def test_a_decode_workload_of_64_token_pages_counts_the_last_page(tmp_path):
    path = dataset(tmp_path, DECODE, {"kv_indptr": [0, 2, 3, 3], "kv_indices": [5, 9, 1],
                                      "kv_last_page_len": [10, 64, 1]})
    _, named, skipped = read_workloads(path)
    assert named[0][1].requests == (R(1, 74), R(1, 64)) and skipped == 1  # the third request has no page


def test_a_step_trace_round_trips_through_workloads(tmp_path):
    trace = tmp_path / "t.jsonl"
    assert invoke("trace", "convert", "--case", "a=3*1@700,300@900c,4@50:3", "--case", "b=2*1@64",
                  "--heads", "32", "--kv-heads", "8", "--dim", "128", "--block-size", "16", "--out", trace).exit_code == 0
    for page in ("1", "16", "64"):
        out = tmp_path / f"fib{page}"
        result = invoke("trace", "to-flashinfer-bench", trace, "--out", out, "--page-size", page)
        assert result.exit_code == 0, result.output
        read = {}
        for stage in ("decode", "prefill_causal"):
            path = out / "workloads" / "gqa_paged" / f"gqa_paged_{stage}_h32_kv8_d128_ps{page}.jsonl"
            if path.exists():
                read.update({uuid: step.requests for uuid, step in read_workloads(path)[1]})
        assert read == {"step0-decode": (R(1, 700),) * 3, "step0-prefill": (R(300, 900), R(4, 50)),
                        "step1-decode": (R(1, 64),) * 2}


def test_converting_workloads_records_their_shape(tmp_path):
    path = dataset(tmp_path, PREFILL, {"qo_indptr": [0, 3], "kv_indptr": [0, 4], "kv_indices": range(4)})
    out = tmp_path / "t.jsonl"
    assert invoke("trace", "convert", "--flashinfer-bench", path, "--out", out).exit_code == 0
    trace = read_trace(out)
    assert trace.header.shape.as_dict() == {"num_heads": 32, "num_kv_heads": 4, "head_dim": 128, "block_size": 1}
    assert trace.header.generator == {"cases": ["w0"], "skipped_empty_rows": 0}


GOOD = {"qo_indptr": [0, 3], "kv_indptr": [0, 4], "kv_indices": range(4)}
BAD = {  # name -> (definition, tensors, inputs or None, words)
    "not a paged GQA definition": ("gemm_n4096_k4096", GOOD, None, ["definition:", "paged GQA"]),
    "random index input": (PREFILL, GOOD, {"qo_indptr": {"type": "random"}}, ["inputs.qo_indptr", "no lengths"]),
    "missing tensor file": (PREFILL, GOOD, {"qo_indptr": {"type": "safetensors", "path": "nope.safetensors",
                                                          "tensor_key": "qo_indptr"}}, ["nope.safetensors"]),
    "wrong tensor key": (PREFILL, GOOD, {k: {"type": "safetensors", "path": f"blob/workloads/gqa_paged/{PREFILL}/w0"
                                                ".safetensors", "tensor_key": "x"} for k in GOOD}, ["inputs.", "'x'"]),
    "indptr decreasing": (PREFILL, {**GOOD, "qo_indptr": [0, 3, 1]}, None, ["inputs.qo_indptr", "indptr"]),
    "indptr not from 0": (PREFILL, {**GOOD, "kv_indptr": [2, 4]}, None, ["inputs.kv_indptr"]),
    "request counts differ": (PREFILL, {**GOOD, "kv_indptr": [0, 4, 6]}, None, ["requests"]),
    "keys below the query": (PREFILL, {**GOOD, "qo_indptr": [0, 9]}, None, ["kv_len"]),
    "last page too long": (DECODE, {"kv_indptr": [0, 1], "kv_indices": [0], "kv_last_page_len": [65]}, None,
                           ["inputs.kv_last_page_len"]),
    "last page missing": (DECODE, {"kv_indptr": [0, 1], "kv_indices": [0]}, None, ["inputs.kv_last_page_len"]),
}


@pytest.mark.parametrize("name", list(BAD))
def test_a_bad_workload_is_one_line_naming_file_line_and_input(tmp_path, name):
    definition, tensors, inputs, words = BAD[name]
    path = dataset(tmp_path, definition, tensors, inputs)
    before = snapshot(tmp_path)
    line = assert_one_error_line(invoke("trace", "convert", "--flashinfer-bench", path, "--out", tmp_path / "o.jsonl"))
    assert f"{path}:1:" in line and all(word in line for word in words), line
    assert snapshot(tmp_path) == before


def test_a_trace_without_a_shape_or_over_a_users_folder_is_refused(tmp_path):
    trace, out = tmp_path / "t.jsonl", tmp_path / "fib"
    assert invoke("trace", "convert", "--batch-spec", "q8", "--out", trace).exit_code == 0
    assert "attention shape" in assert_one_error_line(invoke("trace", "to-flashinfer-bench", trace, "--out", out))
    assert invoke("trace", "convert", "--steps", trace, "--heads", "8", "--kv-heads", "8", "--dim", "64",
                  "--out", trace.with_name("s.jsonl")).exit_code == 0
    out.mkdir()
    (out / "mine.txt").write_text("keep me\n")  # no record of what attnbench wrote: even --force is refused
    assert "no record" in assert_one_error_line(invoke("trace", "to-flashinfer-bench", trace.with_name("s.jsonl"),
                                                       "--out", out, "--force"))
    (out / "mine.txt").unlink()
    assert invoke("trace", "to-flashinfer-bench", trace.with_name("s.jsonl"), "--out", out).exit_code == 0
    (out / "mine.txt").write_text("keep me\n")
    for extra in ([], ["--force"]):
        result = invoke("trace", "to-flashinfer-bench", trace.with_name("s.jsonl"), "--out", out, *extra)
        if extra:  # --force writes beside a file it did not write, and leaves that file alone
            assert result.exit_code == 0, result.output
        else:
            assert "--out" in assert_one_error_line(result)
        assert (out / "mine.txt").read_text() == "keep me\n"
    assert "--page-size" in assert_one_error_line(invoke("trace", "to-flashinfer-bench", trace.with_name("s.jsonl"),
                                                         "--out", tmp_path / "x", "--page-size", "0"))
    assert Counter(p.suffix for p in (out / "workloads" / "gqa_paged").iterdir()) == Counter({".jsonl": 1})


@settings(max_examples=25, deadline=None)
@given(steps=st.lists(st.lists(st.tuples(st.integers(1, 300), st.integers(0, 3000), st.booleans()), min_size=1,
                               max_size=12), min_size=1, max_size=4),
       page=st.sampled_from([1, 16, 64]))
def test_any_step_keeps_its_rows_through_workloads(tmp_path_factory, steps, page):
    """Every row comes back once, in its call (decode: one token and not a chunk), with its lengths."""
    trace = Trace(Header("h", Shape(32, 8, 128)), tuple(TraceStep(tuple(R(q, q + extra, chunked=c and q > 1)
                                                                       for q, extra, c in rows)) for rows in steps))
    out = tmp_path_factory.mktemp("fib") / "out"
    write_flashinfer_bench(trace, out, False, page)
    read = {}
    for path in sorted((out / "workloads" / "gqa_paged").iterdir()):
        read.update({uuid: Counter((r.query_len, r.kv_len) for r in step.requests)
                     for uuid, step in read_workloads(path)[1]})
    for i, step in enumerate(trace.steps):
        for stage in ("decode", "prefill"):
            rows = Counter((r.query_len, r.kv_len) for r in step.requests
                           if (r.query_len == 1 and not r.chunked) == (stage == "decode"))
            assert read.get(f"step{i}-{stage}", Counter()) == rows
