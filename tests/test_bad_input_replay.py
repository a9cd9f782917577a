"""Bad input to `attnbench replay`: each is one `error:` line naming the file and field or the flag,
exit 1, no traceback, and nothing lost: the trace, an earlier run in --out or --resume, as they were.

Bad step trace files (every one `attnbench trace` refuses, tests/test_bad_input_traces.py), a trace
without a shape and no shape flags, bad flags, and bad places to write. `-s` prints how many.
"""

from __future__ import annotations

import pytest
from bad_input_cli import SETTINGS, invoke
from bad_results import counted, refused
from hypothesis import given
from hypothesis import strategies as st
from test_bad_input_traces import BAD_TRACES

from attnbench.traces.jsonl import trace_text
from attnbench.traces.steps import Header, Request, Shape, Trace, TraceStep

TRIED: set[tuple[str, str]] = set()
count_what_was_tried = counted(TRIED, __name__)
FAST = ["--budget-ms", "2", "--device", "cpu"]


def good_trace(path, shape: Shape = Shape(2, 1, 16)):
    steps = (TraceStep((Request(1, 9), Request(1, 30))), TraceStep((Request(1, 40), Request(8, 8))))
    path.write_text(trace_text(Trace(Header("test", shape), steps)))
    return path


@pytest.fixture(scope="module")
def earlier(tmp_path_factory):
    """A finished replay to point --out and --resume at."""
    root = tmp_path_factory.mktemp("earlier")
    trace = good_trace(root / "t.jsonl")
    assert invoke("replay", trace, *FAST, "--out", root / "run").exit_code == 0
    return trace, root / "run"


@pytest.mark.parametrize("name", list(BAD_TRACES))
def test_a_bad_step_trace_is_one_line_naming_file_line_and_field(tmp_path, name):
    content, words = BAD_TRACES[name]
    trace = tmp_path / "bad.jsonl"
    trace.write_bytes(content)
    TRIED.add(("trace", name))
    refused(["replay", trace, *FAST, "--out", tmp_path / "out"], [str(trace), *words], tmp_path)
    assert not (tmp_path / "out").exists()


BAD_FLAGS = {  # flags -> words the error line holds
    ("--heads", "0"): ["--heads"],
    ("--heads", "3", "--kv-heads", "2"): ["--kv-heads", "divisible"],
    ("--dim", "12"): ["--dim", "multiple of 8"],
    ("--dim", "0"): ["--dim"],
    ("--dtype", "fp8"): ["--dtype"],
    ("--block-size", "8"): ["--block-size"],
    ("--bucket-ratio", "1"): ["--bucket-ratio"],
    ("--bucket-ratio", "nan"): ["--bucket-ratio"],
    ("--bucket-ratio", "x"): ["--bucket-ratio"],
    ("--exact-sample", "-1"): ["--exact-sample"],
    ("--mode", "graph"): ["--mode", "CUDA"],
    ("--mode", "fast"): ["--mode"],
    ("--strategy", "bogus"): ["--strategy"],
    ("--strategy", "split,split"): ["--strategy"],
    ("--backend", "fa9"): ["--backend"],
    ("--budget-ms", "0"): ["--budget-ms"],
    ("--budget-ms", "nan"): ["--budget-ms"],
    ("--rel-spread", "2"): ["--rel-spread"],
    ("--replicates", "0"): ["--replicates"],
    ("--shard", "5/2"): ["--shard"],
    ("--shard", "9/10"): ["--shard", "gets none"],
    ("--shard", "x"): ["--shard"],
    ("--point-timeout", "5"): ["--point-timeout", "--isolate"],
    ("--isolate", "--point-timeout", "-1"): ["--point-timeout"],
    ("--device", "tpu"): ["--device"],
    ("--seed", "-1"): ["--seed"],
    ("--seed", str(2 ** 63)): ["--seed"],
}


@pytest.mark.parametrize("flags", list(BAD_FLAGS), ids=" ".join)
def test_a_bad_flag_is_one_line_naming_it_and_the_earlier_run_stays(flags, earlier, tmp_path):
    trace, run = earlier
    TRIED.add(("flag", " ".join(flags)))
    refused(["replay", trace, *FAST, *flags, "--out", run, "--force"], BAD_FLAGS[flags], run, trace.parent)


def test_a_trace_without_a_shape_needs_the_flags(tmp_path):
    trace = good_trace(tmp_path / "t.jsonl", Shape())
    TRIED.add(("shape", "none"))
    refused(["replay", trace, *FAST, "--out", tmp_path / "o"], ["--heads", "no shape.num_heads"], tmp_path)
    refused(["replay", trace, *FAST, "--heads", "4", "--out", tmp_path / "o"], ["--dim", "no shape.head_dim"],
            tmp_path)
    assert not (tmp_path / "o").exists()


def test_bad_places_are_one_line_and_lose_nothing(tmp_path, earlier):
    trace, run = earlier
    (tmp_path / "file").write_text("mine")
    cases = {
        "missing trace": (["replay", tmp_path / "none.jsonl", *FAST, "--out", tmp_path / "o"], ["none.jsonl"]),
        "trace a directory": (["replay", tmp_path, *FAST, "--out", tmp_path / "o"], [str(tmp_path)]),
        "out a file": (["replay", trace, *FAST, "--out", tmp_path / "file"], ["--out", "is a file"]),
        "out not empty": (["replay", trace, *FAST, "--out", run], ["--out", "not empty"]),
        "resume nothing": (["replay", trace, *FAST, "--resume", tmp_path / "nothing"], ["--resume"]),
        "resume elsewhere": (["replay", trace, *FAST, "--resume", run, "--out", tmp_path / "o"], ["--resume/--out"]),
        "resume other flags": (["replay", trace, *FAST, "--resume", run, "--bucket-ratio", "3"], ["--bucket-ratio"]),
        "resume a kernel run": (["replay", trace, *FAST, "--resume", tmp_path / "k"], ["attnbench kernel"]),
    }
    assert invoke("kernel", "--heads", "2", "--dim", "16", "--tokens", "4", "--kind", "decode", "--context", "16",
                  *FAST, "--out", tmp_path / "k").exit_code == 0
    for name, (args, words) in cases.items():
        TRIED.add(("place", name))
        refused(args, words, tmp_path, run, trace.parent)


@SETTINGS
@given(ratio=st.floats(allow_nan=True, allow_infinity=True).filter(lambda r: not 1 < r <= 1024),
       sample=st.integers(max_value=-1))
def test_any_bad_ratio_or_sample_is_refused(earlier, ratio, sample):
    trace, run = earlier
    for flags, word in ((["--bucket-ratio", repr(ratio)], "--bucket-ratio"), (["--exact-sample", str(sample)],
                                                                               "--exact-sample")):
        TRIED.add(("generated", " ".join(flags)))
        refused(["replay", trace, *FAST, *flags, "--out", run.parent / "never"], [word], run, trace.parent)
