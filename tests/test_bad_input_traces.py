"""Bad input to `attnbench trace` (issue 21): each is one `error:` line naming the file, the line and
the field (or the flag), exit 1, no traceback, and every file it was pointed at as it was.

Step trace files, shapes files, --case and --batch-spec strings, request traces (timed JSON Lines,
BurstGPT CSV), scheduler and generator flags, and outputs that are links, directories, inputs or a
user's own file. `-s` prints how many distinct bad inputs were tried.
"""

from __future__ import annotations

import json
import os

import pytest
from bad_input_cli import SETTINGS, assert_one_error_line, invoke
from bad_results import counted, snapshot
from hypothesis import given
from hypothesis import strategies as st

TRIED: set[tuple[str, str]] = set()
count_what_was_tried = counted(TRIED, __name__)
HEADER = {"format": "attnbench-step-trace", "version": 1, "source": "t"}
STEP = {"query_len": [1, 8], "kv_len": [9, 8]}


def lines(*values) -> bytes:
    return b"".join((v if isinstance(v, bytes) else json.dumps(v).encode()) + b"\n" for v in values)


def header(**changes) -> dict:
    return {k: v for k, v in {**HEADER, **changes}.items() if v is not ...}


BAD_TRACES = {  # name -> (file bytes, words the error line holds)
    "empty": (b"", ["is empty"]),
    "blank lines only": (b"\n \n", ["is empty"]),
    "not json": (b"hello\n", [":1:", "not a JSON object"]),
    "json array": (lines([1, 2]), [":1:", "expected a JSON object"]),
    "cut short": (lines(HEADER, STEP) + b'{"query_len": [1', [":3:", "not a JSON object"]),
    "nested deep": (lines(HEADER) + b"[" * 100_000 + b"]" * 100_000 + b"\n", [":2:", "not a JSON object"]),
    "not utf-8": (lines(HEADER) + b"\xff\xfe\n", [":2:", "not UTF-8"]),
    "nul byte": (lines(HEADER) + b'{"query_len": [1]\x00}\n', [":2:", "NUL"]),
    "another format": (lines(header(format="flashinfer-bench"), STEP), [":1:", "format:", "attnbench-step-trace"]),
    "no format": (lines(header(format=...), STEP), [":1:", "format:"]),
    "newer version": (lines(header(version=99), STEP), [":1:", "version 99 is newer"]),
    "version text": (lines(header(version="1"), STEP), [":1:", "version:"]),
    "version zero": (lines(header(version=0), STEP), [":1:", "version:"]),
    "header typo": (lines(header(sorce="x"), STEP), [":1:", "sorce: unknown header field"]),
    "source number": (lines(header(source=5), STEP), [":1:", "source:"]),
    "shape a list": (lines(header(shape=[32]), STEP), [":1:", "shape:"]),
    "shape typo": (lines(header(shape={"heads": 32}), STEP), [":1:", "shape.heads"]),
    "shape heads negative": (lines(header(shape={"num_heads": -1}), STEP), [":1:", "shape.num_heads"]),
    "shape gqa indivisible": (lines(header(shape={"num_heads": 6, "num_kv_heads": 4}), STEP), [":1:", "divisible"]),
    "shape dtype": (lines(header(shape={"dtype": "fp8"}), STEP), [":1:", "shape.dtype"]),
    "synthesized text": (lines(header(synthesized="yes"), STEP), [":1:", "synthesized:"]),
    "generator a list": (lines(header(generator=[]), STEP), [":1:", "generator"]),
    "header only": (lines(HEADER), ["no step"]),
    "kv_len missing": (lines(HEADER, {"query_len": [1]}), [":2:", "kv_len: missing"]),
    "query_len zero": (lines(HEADER, {"query_len": [0], "kv_len": [4]}), [":2:", "query_len:", "between 1"]),
    "kv_len negative": (lines(HEADER, {"query_len": [1], "kv_len": [-4]}), [":2:", "kv_len:"]),
    "kv_len of 401 digits": (lines(HEADER, {"query_len": [1], "kv_len": [10**400]}),
                             [":2:", "kv_len:", "got an integer of 401 digits"]),
    "kv_len below query_len": (lines(HEADER, STEP, {"query_len": [1, 9], "kv_len": [9, 8]}),
                               [":3:", "kv_len: must be at least query_len", "request 1"]),
    "query_len text": (lines(HEADER, {"query_len": ["1"], "kv_len": [4]}), [":2:", "query_len: expected an integer"]),
    "query_len float": (lines(HEADER, {"query_len": [1.5], "kv_len": [4]}), [":2:", "query_len: expected an integer"]),
    "query_len bool": (lines(HEADER, {"query_len": [True], "kv_len": [4]}), [":2:", "query_len: expected an integer"]),
    "query_len NaN": (lines(HEADER) + b'{"query_len": [NaN], "kv_len": [4]}\n', [":2:", "query_len"]),
    "query_len huge": (lines(HEADER, {"query_len": [10 ** 30], "kv_len": [4]}), [":2:", "query_len:", "between"]),
    "columns of two lengths": (lines(HEADER, {"query_len": [1, 1], "kv_len": [4]}), [":2:", "one value per request"]),
    "empty columns": (lines(HEADER, {"query_len": [], "kv_len": []}), [":2:", "non-empty list"]),
    "column not a list": (lines(HEADER, {"query_len": 1, "kv_len": 4}), [":2:", "query_len:", "list"]),
    "step typo": (lines(HEADER, {"query_len": [1], "kvlen": [4]}), [":2:", "kvlen: unknown step field"]),
    "drafts not below query_len": (lines(HEADER, {"query_len": [2], "kv_len": [4], "num_draft_tokens": [2]}),
                                   [":2:", "num_draft_tokens:"]),
    "prefix hit past the cache": (lines(HEADER, {"query_len": [2], "kv_len": [4], "prefix_hit": [3]}),
                                  [":2:", "prefix_hit:"]),
    "chunked as a number": (lines(HEADER, {"query_len": [2], "kv_len": [4], "chunked": [1]}), [":2:", "chunked:"]),
    "too many requests": (lines(HEADER, {"query_len": [1] * 65537, "kv_len": [1] * 65537}), [":2:", "65536 requests"]),
}


@pytest.mark.parametrize("name", list(BAD_TRACES))
@pytest.mark.parametrize("command", ["summary", "convert"])
def test_a_bad_step_trace_is_one_line_naming_file_line_and_field(tmp_path, name, command):
    content, words = BAD_TRACES[name]
    trace = tmp_path / "bad.jsonl"
    trace.write_bytes(content)
    args = ["trace", "summary", trace] if command == "summary" else \
        ["trace", "convert", "--steps", trace, "--out", tmp_path / "out.jsonl"]
    refused(args, [str(trace), *words], tmp_path, what=("step trace", name))


def refused(args, named, *keep, what):
    TRIED.add(what)
    before = snapshot(*keep)
    line = assert_one_error_line(invoke(*args))
    assert all(word in line for word in named), (named, line)
    assert snapshot(*keep) == before, "a refused command changed a file"


def test_a_trace_too_large_is_refused_before_it_is_read(tmp_path):
    trace = tmp_path / "huge.jsonl"
    with open(trace, "wb") as f:  # sparse: the size is there, the bytes are not
        f.truncate((64 << 20) + 1)
    refused(["trace", "summary", trace], [str(trace), "at most 67108864 bytes"], what=("step trace", "huge"))


@pytest.mark.parametrize("source", ["steps", "shapes", "case", "synth"])
def test_a_trace_past_the_row_cap_is_refused(tmp_path, monkeypatch, source):
    """The cap (4 million request rows) lowered to 5: every reader and the simulation count rows."""
    monkeypatch.setattr("attnbench.traces.steps.MAX_TRACE_ROWS", 5)
    steps, shapes = tmp_path / "t.jsonl", tmp_path / "s.json"
    steps.write_bytes(lines(HEADER, STEP, STEP, STEP))
    shapes.write_text('{"cases": [{"requests": [{"query_len": 1, "count": 3}]}, {"requests": [{"query_len": 1, "count": 3}]}]}')
    args = {"steps": ["--steps", steps], "shapes": ["--shapes", shapes], "case": ["--case", "a=3*1", "--case", "b=3*1"],
            "synth": ["--num-requests", "9", "--rate", "0", "--output-len", "4"]}[source]
    command = ["trace", "synth"] if source == "synth" else ["trace", "convert"]
    refused([*command, *args, "--out", tmp_path / "o.jsonl"], ["more than 5 request rows"], tmp_path,
            what=("row cap", source))


@pytest.mark.parametrize("kind", ["directory", "missing"])
def test_a_trace_that_is_not_a_file(tmp_path, kind):
    trace = tmp_path / "t.jsonl"
    if kind == "directory":
        trace.mkdir()
    refused(["trace", "summary", trace], [str(trace)], tmp_path, what=("step trace", kind))


BAD_SHAPES = {
    "not json": ("{cases", ["not JSON"]),
    "a list": ("[]", ['expected {"cases"']),
    "no cases": ('{"cases": []}', ['expected {"cases"']),
    "case not an object": ('{"cases": [3]}', ["cases[0]", "list of requests"]),
    "no requests": ('{"cases": [{"name": "a"}]}', ["cases[0]", "list of requests"]),
    "name a number": ('{"cases": [{"name": 3, "requests": []}]}', ["cases[0]", "name:"]),
    "no request": ('{"cases": [{"name": "a", "requests": []}]}', ["cases[0] (a)", "count:"]),
    "request not an object": ('{"cases": [{"requests": [5]}]}', ["requests", "expected an object"]),
    "query_len missing": ('{"cases": [{"requests": [{"kv_len": 5}]}]}', ["requests[0]", "query_len: missing"]),
    "typo": ('{"cases": [{"requests": [{"query_len": 1, "kvlen": 5}]}]}', ["requests[0]", "kvlen: unknown field"]),
    "count zero": ('{"cases": [{"requests": [{"query_len": 1, "count": 0}]}]}', ["requests[0]", "count:"]),
    "count past the cap": ('{"cases": [{"requests": [{"query_len": 1, "count": 1000000000}]}]}', ["count:"]),
    "kv below query": ('{"cases": [{"requests": [{"query_len": 9, "kv_len": 5}]}]}', ["requests[0]", "kv_len:"]),
    "chunked text": ('{"cases": [{"requests": [{"query_len": 9, "chunked": "y"}]}]}', ["requests[0]", "chunked:"]),
}


@pytest.mark.parametrize("name", list(BAD_SHAPES))
def test_a_bad_shapes_file(tmp_path, name):
    text, words = BAD_SHAPES[name]
    shapes = tmp_path / "shapes.json"
    shapes.write_text(text)
    refused(["trace", "convert", "--shapes", shapes, "--out", tmp_path / "o.jsonl"], [str(shapes), *words],
            tmp_path, what=("shapes", name))


def test_a_bad_yaml_shapes_file(tmp_path):
    pytest.importorskip("yaml", reason="pyyaml is not installed: YAML is refused with a line saying so")
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text("cases: [\n  - {name: a\n")
    refused(["trace", "convert", "--shapes", shapes, "--out", tmp_path / "o.jsonl"], [str(shapes), "not YAML"],
            tmp_path, what=("shapes", "yaml"))


BAD_STRINGS = {
    "--case": ["nameonly", "=1@2", "a=", "a=x", "a=1@0", "a=2@1", "a=1:1", "a=0*1", "a=99999999*1", "a=1@2,,",
               "a=1e3", "a=1" + "0" * 40],
    "--batch-spec": ["", "q", "2q", "q2kkv1", "0q1", "q0", "q2kv1", "99999q1_99999q1", "q1_", "abc", "q1kv" + "9" * 40],
}


@pytest.mark.parametrize("flag,text", [(f, t) for f, texts in BAD_STRINGS.items() for t in texts])
def test_a_bad_case_or_batch_spec(tmp_path, flag, text):
    refused(["trace", "convert", flag, text, "--out", tmp_path / "o.jsonl"], [flag], tmp_path, what=(flag, text))


BAD_REQUESTS = {
    "--timed-trace": {
        "empty": ("", ["is empty"]),
        "timestamp missing": ('{"input_length": 5, "output_length": 5}', [":1:", "timestamp: missing"]),
        "timestamp negative": ('{"timestamp": -1, "input_length": 5, "output_length": 5}', [":1:", "timestamp:"]),
        "timestamp NaN": ('{"timestamp": NaN, "input_length": 5, "output_length": 5}', [":1:", "timestamp:"]),
        "timestamp past a float": ('{"timestamp": 0, "input_length": 5, "output_length": 5}\n{"timestamp": 1'
                                   + "0" * 400 + ', "input_length": 5, "output_length": 5}', [":2:", "timestamp:"]),
        "timestamp Infinity": ('{"timestamp": 1e999, "input_length": 5, "output_length": 5}', [":1:", "timestamp:"]),
        "input zero": ('{"timestamp": 0, "input_length": 0, "output_length": 5}', [":1:", "input_length:"]),
        "output text": ('{"timestamp": 0, "input_length": 5, "output_length": "5"}', [":1:", "output_length:"]),
        "prefix past the prompt": ('{"timestamp": 0, "input_length": 5, "output_length": 5, "prefix_length": 6}',
                                   [":1:", "prefix_length:"]),
        "prompt past the cap": ('{"timestamp": 0, "input_length": 99999999, "output_length": 5}', [":1:", "input_length"]),
        "not an object": ("[0, 5, 5]", [":1:", "expected a JSON object"]),
    },
    "--burstgpt": {
        "empty": ("", ["is empty"]),
        "column missing": ("Timestamp,Request tokens\n0,5\n", [":1:", "Response tokens: missing column"]),
        "header only": ("Timestamp,Request tokens,Response tokens\n", ["holds no request"]),
        "every request failed": ("Timestamp,Request tokens,Response tokens\n0,5,0\n", ["holds no request"]),
        "a word for a number": ("Timestamp,Request tokens,Response tokens\n0,five,3\n", [":2:", "Request tokens:"]),
        "timestamp nan": ("Timestamp,Request tokens,Response tokens\nnan,5,3\n", [":2:", "Timestamp:"]),
        "timestamp 1e999": ("Timestamp,Request tokens,Response tokens\n1e999,5,3\n", [":2:", "Timestamp:"]),
        "tokens inf": ("Timestamp,Request tokens,Response tokens\n0,inf,3\n", [":2:", "Request tokens:"]),
        "negative tokens": ("Timestamp,Request tokens,Response tokens\n0,5,-3\n", [":2:", "Response tokens:"]),
        "fractional tokens": ("Timestamp,Request tokens,Response tokens\n0,5.5,3\n", [":2:", "whole number"]),
        "no prompt": ("Timestamp,Request tokens,Response tokens\n0,0,3\n", [":2:", "Request tokens:"]),
        "short row": ("Timestamp,Request tokens,Response tokens\n0,5\n", [":2:", "Response tokens:"]),
        "nul byte": ("Timestamp,Request tokens,Response tokens\n0,5\x00,3\n", ["NUL"]),
    },
}


@pytest.mark.parametrize("flag,name", [(f, n) for f, cases in BAD_REQUESTS.items() for n in cases])
def test_a_bad_request_trace(tmp_path, flag, name):
    text, words = BAD_REQUESTS[flag][name]
    requests = tmp_path / "requests.txt"
    requests.write_text(text)
    refused(["trace", "convert", flag, requests, "--out", tmp_path / "o.jsonl"], [str(requests), *words],
            tmp_path, what=(flag, name))


SYNTH = ["trace", "synth", "--num-requests", "3"]
BAD_FLAGS = {  # extra flags -> the flag the error names
    ("--max-num-batched-tokens", "0"): "--max-num-batched-tokens", ("--max-num-seqs", "0"): "--max-num-seqs",
    ("--chunk-size", "-1"): "--chunk-size", ("--num-draft-tokens", "5000"): "--num-draft-tokens",
    ("--step-ms", "0"): "--step-ms", ("--step-ms", "nan"): "--step-ms", ("--max-steps", "0"): "--max-steps",
    ("--block-size", "0"): "--block-size", ("--heads", "0"): "--heads", ("--heads", "6", "--kv-heads", "4"): "--kv-heads",
    ("--dim", "-8"): "--dim", ("--dtype", "fp8"): "--dtype", ("--num-requests", "0"): "--num-requests",
    ("--rate", "-1"): "--rate", ("--rate", "inf"): "--rate", ("--input-len", "lognormal:0:1"): "--input-len",
    ("--input-len", "uniform:5:2"): "--input-len", ("--input-len", "foo"): "--input-len",
    ("--output-len", "0"): "--output-len", ("--output-len", "lognormal:10:9"): "--output-len",
    ("--prefix-share", "1.5"): "--prefix-share", ("--prefix-len", "-3"): "--prefix-len", ("--seed", "-1"): "--seed",
}


@pytest.mark.parametrize("extra", list(BAD_FLAGS), ids=" ".join)
def test_a_bad_flag(tmp_path, extra):
    refused([*SYNTH, *extra, "--out", tmp_path / "o.jsonl"], [BAD_FLAGS[extra]], tmp_path, what=("flag", extra))
    assert not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize("args,flag", [
    (["--time-unit", "h", "--batch-spec", "q1"], "--time-unit"),
    (["--batch-spec", "q1", "--case", "a=1"], "--case/--batch-spec"),
    ([], "--steps/--shapes"),
], ids=["time unit", "two inputs", "no input"])
def test_convert_takes_one_kind_of_input(tmp_path, args, flag):
    refused(["trace", "convert", *args, "--out", tmp_path / "o.jsonl"], [flag], tmp_path, what=("convert", flag))


@pytest.mark.parametrize("target", ["user file", "user file, --force", "symlink", "directory", "missing folder",
                                    "the input", "request file over a step trace"])
def test_an_output_attnbench_did_not_write_is_kept(tmp_path, target):
    out, spec = tmp_path / "out.jsonl", ["--batch-spec", "q1"]
    (tmp_path / "mine.txt").write_text("my notes\n")
    args = ["trace", "convert", *spec, "--out", out]
    if target.startswith("user file"):
        out.write_text("my notes\n")
        args += ["--force"] if "force" in target else []
    elif target == "symlink":
        out.symlink_to(tmp_path / "mine.txt")
    elif target == "directory":
        out.mkdir()
    elif target == "missing folder":
        args[-1] = tmp_path / "nope" / "out.jsonl"
    elif target == "the input":
        assert invoke(*args).exit_code == 0
        args = ["trace", "convert", "--steps", out, "--out", out, "--force"]
    else:
        assert invoke(*args).exit_code == 0
        args = ["trace", "requests", "--num-requests", "2", "--out", out, "--force"]
    refused(args, ["--out"], tmp_path, what=("output", target))
    assert os.path.islink(out) == (target == "symlink")


@SETTINGS
@given(data=st.binary(max_size=300))
def test_any_bytes_read_or_refuse_in_one_line(tmp_path, data):
    trace = tmp_path / "fuzz.jsonl"
    trace.write_bytes(lines(HEADER) + data)
    TRIED.add(("fuzzed trace", data.hex()))
    result = invoke("trace", "summary", trace)
    assert result.exit_code == 0 or assert_one_error_line(result)


@SETTINGS
@given(text=st.text(alphabet="0123456789qkvs_*@c:,=ab", max_size=30))
def test_any_spec_string_reads_or_refuses_in_one_line(tmp_path, text):
    for flag in ("--case", "--batch-spec"):
        TRIED.add((flag, text))
        result = invoke("trace", "convert", flag, text, "--out", tmp_path / "o.jsonl", "--force")
        assert result.exit_code == 0 or assert_one_error_line(result)
