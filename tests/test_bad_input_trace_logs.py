"""Bad aggregate step logs given to `attnbench trace convert --sglang-log/--vllm-log` (issue 21):
each is one `error:` line naming the file, the line and the field, exit 1, no traceback, and every
file under the test's folder as it was (the log, and an --out that was there). `-s` prints how many
distinct bad inputs were tried.
"""

from __future__ import annotations

import json

import pytest
from bad_input_cli import SETTINGS, assert_one_error_line, invoke
from bad_results import counted, snapshot
from hypothesis import given
from hypothesis import strategies as st

TRIED: set[tuple[str, str]] = set()
count_what_was_tried = counted(TRIED, __name__)
PREFILL = "[2025-01-23 19:35:28 TP0] Prefill batch. #new-seq: {seq}, #new-token: {tok}, #cached-token: {hit}, " \
          "token usage: 0.00, #running-req: 0, #queue-req: 0"
DECODE = "[2025-01-23 19:35:29 TP0] Decode batch. #running-req: {run}, #token: {kv}, token usage: 0.01, " \
         "gen throughput (token/s): 10.00, #queue-req: 0"
ITERATION = "INFO 06-10 14:00:00 [core.py:250] Iteration(1): {ctx} context requests, {ctx_tok} context tokens, " \
            "{gen} generation requests, {gen_tok} generation tokens, iteration elapsed time: 1.00 ms"
GOOD_PREFILL = PREFILL.format(seq=1, tok=7, hit=0)
GOOD_ITERATION = ITERATION.format(ctx=1, ctx_tok=7, gen=2, gen_tok=2)

BAD_LOGS = {  # name -> (flag, file bytes, words the error line holds)
    "empty": ("--sglang-log", b"", ["is empty"]),
    "no known line": ("--sglang-log", b"INFO: Uvicorn running\nINFO: ready\n", ["no SGLang", "in 2 lines"]),
    "vllm log to sglang": ("--sglang-log", GOOD_ITERATION.encode(), ["no SGLang"]),
    "sglang log to vllm": ("--vllm-log", GOOD_PREFILL.encode(), ["no vLLM"]),
    "only a dummy iteration": ("--vllm-log", (ITERATION.format(ctx=0, ctx_tok=0, gen=0, gen_tok=0) + " (dummy)").encode(),
                               ["no vLLM"]),
    "letters for a count": ("--sglang-log", f"{GOOD_PREFILL}\n{PREFILL.format(seq=2, tok='9x0', hit=0)}\n".encode(),
                            [":2:", "#new-token:", "whole number"]),
    "negative count": ("--sglang-log", PREFILL.format(seq=1, tok=-5, hit=0).encode(), [":1:", "#new-token:"]),
    "fraction": ("--sglang-log", DECODE.format(run="2.5", kv=100).encode(), [":1:", "#running-req:", "whole number"]),
    "unicode digits": ("--sglang-log", PREFILL.format(seq="٣", tok=7, hit=0).encode(), [":1:", "#new-seq:"]),
    "huge count": ("--sglang-log", PREFILL.format(seq=1, tok=10 ** 30, hit=0).encode(), [":1:", "#new-token:", "at most"]),
    "huge cached": ("--sglang-log", PREFILL.format(seq=1, tok=7, hit=10 ** 40).encode(), [":1:", "#cached-token:"]),
    "missing field": ("--sglang-log", b"[x] Prefill batch. #new-seq: 2, token usage: 0.1\n", [":1:", "#new-token:", "missing"]),
    "decode without requests field": ("--sglang-log", b"[x] Decode batch. #token: 40, token usage: 0.1\n",
                                      [":1:", "#running-req:", "missing"]),
    "fewer tokens than requests": ("--sglang-log", PREFILL.format(seq=5, tok=2, hit=0).encode(), [":1:", "new tokens:"]),
    "more KV than requests hold": ("--sglang-log", DECODE.format(run=1, kv=10 ** 9).encode(), [":1:", "#token:"]),
    "cached past a request's KV": ("--sglang-log", PREFILL.format(seq=1, tok=7, hit=(1 << 22)).encode(),
                                   [":1:", "cached tokens:"]),
    "bad mixed count": ("--sglang-log", b"[x] Prefill batch(mixed #running-req: many). #new-seq: 1, #new-token: 5\n",
                        [":1:", "mixed #running-req:"]),
    "vllm letters": ("--vllm-log", f"{GOOD_ITERATION}\n{ITERATION.format(ctx='x', ctx_tok=1, gen=0, gen_tok=0)}\n".encode(),
                     [":2:", "context requests:"]),
    "vllm fewer tokens": ("--vllm-log", ITERATION.format(ctx=0, ctx_tok=0, gen=4, gen_tok=3).encode(),
                          [":1:", "generation tokens:"]),
    "vllm huge": ("--vllm-log", ITERATION.format(ctx=1, ctx_tok=10 ** 12, gen=0, gen_tok=0).encode(),
                  [":1:", "context tokens:", "at most"]),
    "binary": ("--sglang-log", bytes(range(256)) * 4, ["NUL"]),
    "not utf-8": ("--vllm-log", GOOD_ITERATION.encode() + b"\n\xff\xfe Iteration\n", [":2:", "not UTF-8"]),
    "nul in a line": ("--sglang-log", GOOD_PREFILL.encode() + b"\n\x00" + GOOD_PREFILL.encode() + b"\n", [":2:", "NUL"]),
}


def refused(args, named, keep, what):
    TRIED.add(what)
    before = snapshot(keep)
    line = assert_one_error_line(invoke(*args))
    assert all(word in line for word in named), (named, line)
    assert snapshot(keep) == before, "a refused command changed a file"


@pytest.mark.parametrize("name", list(BAD_LOGS))
def test_a_bad_log_is_one_line_naming_file_line_and_field(tmp_path, name):
    flag, content, words = BAD_LOGS[name]
    log, out = tmp_path / "server.log", tmp_path / "out.jsonl"
    log.write_bytes(content)
    out.write_text('{"format": "attnbench-step-trace", "version": 1, "source": "kept"}\n{"query_len": [1], "kv_len": [4]}\n')
    refused(["trace", "convert", flag, log, "--out", out, "--force"], [str(log), *words], tmp_path, ("log", name))


def test_a_log_too_large_is_refused_before_it_is_read(tmp_path):
    log = tmp_path / "huge.log"
    with open(log, "wb") as f:  # sparse: the size is there, the bytes are not
        f.truncate((1 << 30) + 1)
    refused(["trace", "convert", "--sglang-log", log, "--out", tmp_path / "o.jsonl"],
            [str(log), "at most 1073741824 bytes"], tmp_path, ("log", "huge"))


@pytest.mark.parametrize("kind", ["directory", "missing"])
def test_a_log_that_is_not_a_file(tmp_path, kind):
    log = tmp_path / "server.log"
    if kind == "directory":
        log.mkdir()
    refused(["trace", "convert", "--vllm-log", log, "--out", tmp_path / "o.jsonl"], [str(log)], tmp_path,
            ("log", kind))


def test_a_log_past_the_row_cap_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr("attnbench.traces.steps.MAX_TRACE_ROWS", 5)
    log = tmp_path / "server.log"
    log.write_text("\n".join([DECODE.format(run=3, kv=300)] * 3) + "\n")
    refused(["trace", "convert", "--sglang-log", log, "--out", tmp_path / "o.jsonl"],
            [f"{log}:2:", "more than 5 request rows"], tmp_path, ("log", "row cap"))


BAD_FLAGS = {
    ("--log-input-len", "lognormal:0:1"): "--log-input-len", ("--log-input-len", "x"): "--log-input-len",
    ("--log-kv-len", "uniform:9:2"): "--log-kv-len", ("--seed", "-1"): "--seed",
    ("--vllm-log", "other.log"): "--vllm-log",
}


@pytest.mark.parametrize("extra", list(BAD_FLAGS), ids=" ".join)
def test_a_bad_flag(tmp_path, extra):
    log = tmp_path / "server.log"
    log.write_text(GOOD_PREFILL + "\n")
    refused(["trace", "convert", "--sglang-log", log, *extra, "--out", tmp_path / "o.jsonl"], [BAD_FLAGS[extra]],
            tmp_path, ("flag", " ".join(extra)))
    assert not (tmp_path / "o.jsonl").exists()


def test_a_version_1_trace_with_a_synthesized_mark_is_refused(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"format": "attnbench-step-trace", "version": 1, "source": "t"}) + "\n"
                     + json.dumps({"query_len": [1], "kv_len": [4], "synthesized": True}) + "\n")
    refused(["trace", "summary", trace], [f"{trace}:2:", "synthesized:", "version 1"], tmp_path, ("trace", "v1 mark"))


def test_a_bad_synthesized_mark_is_refused(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"format": "attnbench-step-trace", "version": 2, "source": "t"}) + "\n"
                     + json.dumps({"query_len": [1], "kv_len": [4], "synthesized": "yes"}) + "\n")
    refused(["trace", "summary", trace], [f"{trace}:2:", "synthesized:"], tmp_path, ("trace", "mark not a bool"))


WORDS = st.sampled_from(["Prefill batch", "Decode batch", "Iteration(3): ", "#new-seq: ", "#new-token: ",
                         "#cached-token: ", "#running-req: ", "#token: ", " context requests, ", " context tokens, ",
                         " generation requests, ", " generation tokens", "(mixed #running-req: ", ". ", ", ",
                         "0", "7", "99999999999", "-1", "x", ":", "\n"])


@SETTINGS
@given(parts=st.lists(WORDS, max_size=40), engine=st.sampled_from(["--sglang-log", "--vllm-log"]))
def test_any_log_made_of_its_words_reads_or_refuses_in_one_line(tmp_path, parts, engine):
    log = tmp_path / "fuzz.log"
    log.write_text("".join(parts) + "\n")
    TRIED.add(("fuzzed log", engine + "".join(parts)))
    result = invoke("trace", "convert", engine, log, "--out", tmp_path / "o.jsonl", "--force")
    assert result.exit_code == 0 or assert_one_error_line(result)
