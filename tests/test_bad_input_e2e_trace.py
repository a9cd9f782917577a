"""Bad input to `attnbench e2e --trace`: conflicting flags, bad values and bad trace files are each one
`error:` line naming the flag or the file (and its line and field), exit 1, no traceback, no run
directory made, and neither the trace nor a file of the user's touched.
"""

from __future__ import annotations

import json

import pytest
from bad_input_cli import assert_one_error_line, invoke

GOOD = "".join(json.dumps({"timestamp": t, "input_length": 6, "output_length": 2}) + "\n" for t in (0.0, 0.1))

CONFLICTS = [
    (("--input-len", "8"), "--input-len"), (("--output-len", "4"), "--output-len"),
    (("--batch-size", "2"), "--batch-size"), (("--warmup", "1"), "--warmup"),
    (("--min-iters", "6"), "--min-iters"), (("--precision", "0"), "--precision"), (("--isolate",), "--isolate"),
    (("--profile",), "--profile"), (("--tp", "2"), "--tp 2"), (("--resume", "{tmp}/old"), "--resume"),
    (("--isolate", "--point-timeout", "5"), "--isolate"),
]
VALUES = [
    (("--arrivals", "poisson"), "--arrivals"), (("--arrivals", ""), "--arrivals"),
    *[(("--max-requests", v), "--max-requests") for v in ("0", "-3", "1000001", "x")],
    *[(("--max-num-seqs", v), "--max-num-seqs") for v in ("0", "4097")],
    (("--iters", "1"), "--iters 1"), (("--cudagraph", "full", "--graph-policy", "naive"), "--graph-policy naive"), (("--iters", "0"), "--iters"),
    (("--time-unit", "us"), "--time-unit"), (("--time-unit", ""), "--time-unit"), (("--model", "nope"), "nope"), (("--strategy", "fused2"), "--strategy"),
]
WITHOUT_TRACE = [("--arrivals", "all-at-once"), ("--time-unit", "ms"), ("--max-requests", "3"), ("--max-num-seqs", "4")]


def request(**changes) -> bytes:
    """One timed-trace line: a good request with `changes` (None: the field left out)."""
    fields = {"timestamp": 0, "input_length": 6, "output_length": 2, **changes}
    return json.dumps({k: v for k, v in fields.items() if v is not None}).encode() + b"\n"


CSV_HEAD = b"Timestamp,Request tokens,Response tokens\n"
FILES = [  # (file name, its bytes, what the one line names)
    ("t.jsonl", b"", "is empty"), ("t.jsonl", request() + b"not json\n", "t.jsonl:2"),
    ("t.jsonl", request(output_length=None), "t.jsonl:1: output_length"),
    ("t.jsonl", request(timestamp=-1), "t.jsonl:1: timestamp"),
    ("t.jsonl", request() + request(timestamp=10**400), "t.jsonl:2: timestamp"),  # past a float: was OverflowError
    ("t.jsonl", request() + b'{"timestamp": 1e999, "input_length": 6, "output_length": 2}\n', "t.jsonl:2: timestamp"),
    ("t.jsonl", request() + request(prefix_length=10**400), "t.jsonl:2: prefix_length"),
    ("t.jsonl", request(input_length=0), "t.jsonl:1: input_length"),
    ("t.jsonl", request(input_length="6"), "t.jsonl:1: input_length"),
    ("t.jsonl", b"[1, 2]\n", "t.jsonl:1"), ("t.jsonl", b"\xff\xfe\n", "t.jsonl:1"),
    ("t.jsonl", request(input_length=5000), "4096 positions"),
    ("t.csv", b"Timestamp,Request tokens\n0,5\n", "Response tokens"),
    ("t.csv", CSV_HEAD + b"0,five,2\n", "t.csv:2: Request tokens"), ("t.csv", CSV_HEAD + b"0,5,0\n", "holds no request"),
]


@pytest.fixture
def trace(tmp_path):
    """A good trace and a file of the user's: both must come through every refusal unchanged."""
    path, mine = tmp_path / "good.jsonl", tmp_path / "notes.txt"
    path.write_text(GOOD)
    mine.write_text("mine\n")
    yield path
    assert path.read_text() == GOOD and mine.read_text() == "mine\n"


def e2e(*args):
    return invoke("e2e", "--device", "cpu", *args)


@pytest.mark.parametrize("case, named", CONFLICTS, ids=[c[1] for c in CONFLICTS])
def test_a_flag_the_trace_makes_moot_is_refused(case, named, trace, tmp_path):
    (tmp_path / "old").mkdir()
    out = tmp_path / "out"
    args = [a.replace("{tmp}", str(tmp_path)) for a in case]
    line = assert_one_error_line(e2e("--trace", trace, *args, "--out", out), named)
    assert "--trace" in line and not out.exists()
    assert not any((tmp_path / "old").iterdir())


@pytest.mark.parametrize("case, named", VALUES, ids=[" ".join(c[0]) for c in VALUES])
def test_a_bad_value_is_one_line(case, named, trace, tmp_path):
    out = tmp_path / "out"
    assert_one_error_line(e2e("--trace", trace, *case, "--out", out), named)
    assert not out.exists()


@pytest.mark.parametrize("flag, value", WITHOUT_TRACE)
def test_a_trace_flag_without_a_trace_is_refused(flag, value, tmp_path):
    out = tmp_path / "out"
    line = assert_one_error_line(e2e("--model", "tiny", flag, value, "--out", out), flag)
    assert "only with --trace" in line and not out.exists()


@pytest.mark.parametrize("name, data, named", FILES, ids=[f"{n}:{d[:24]!r}" for n, d, _ in FILES])
def test_a_bad_trace_file_is_one_line_naming_it(name, data, named, tmp_path):
    path, out = tmp_path / name, tmp_path / "out"
    path.write_bytes(data)
    # --max-requests: the requests as they are (the CPU demo's default cuts a prompt to 64 tokens)
    line = assert_one_error_line(e2e("--trace", path, "--max-requests", "1", "--out", out), named)
    assert str(tmp_path) in line and path.read_bytes() == data and not out.exists()


def test_a_time_unit_a_burstgpt_csv_cannot_have_is_refused(tmp_path):
    path, out = tmp_path / "b.csv", tmp_path / "out"
    path.write_bytes(CSV_HEAD + b"0,5,2\n")
    assert_one_error_line(e2e("--trace", path, "--time-unit", "ms", "--out", out), "--time-unit ms")
    assert not out.exists()


@pytest.mark.parametrize("make", ["missing", "directory"])
def test_a_trace_that_is_not_a_file_is_one_line(make, tmp_path):
    path, out = tmp_path / "t.jsonl", tmp_path / "out"
    if make == "directory":
        path.mkdir()
    assert_one_error_line(e2e("--trace", path, "--out", out), str(path))
    assert not out.exists()


def test_a_trace_too_large_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from attnbench.traces import files

    monkeypatch.setattr(files, "MAX_TRACE_BYTES", 64)
    path, out = tmp_path / "t.jsonl", tmp_path / "out"
    path.write_text(GOOD)
    assert_one_error_line(e2e("--trace", path, "--out", out), "at most 64 bytes")
    assert not out.exists()


def test_an_out_that_holds_a_run_is_not_touched(trace, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "trace.csv").write_text("keep\n")
    assert_one_error_line(e2e("--trace", trace, "--out", out), "not empty")
    assert (out / "trace.csv").read_text() == "keep\n" and sorted(p.name for p in out.iterdir()) == ["trace.csv"]


def test_arrivals_a_serve_cannot_wait_for_are_refused(tmp_path):
    """A finite timestamp far past a day would be slept for in real time (time.sleep overflows on 1e300)."""
    path, out = tmp_path / "t.jsonl", tmp_path / "out"
    path.write_bytes(request() + request(timestamp=1e300))
    line = assert_one_error_line(e2e("--trace", path, "--max-requests", "2", "--out", out), "--max-requests")
    assert "--arrivals all-at-once" in line and not out.exists()
