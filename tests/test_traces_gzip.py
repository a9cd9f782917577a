"""Trace files gzip-compressed: every reader takes them (told by the magic bytes, whatever the name)
and reads what the plain file holds; the size limit holds for what they decompress to, a line at a
time, so a small file that inflates past it is refused after at most the limit's worth of bytes;
a broken gzip file is one line. The plain files are the project's own sample traces.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.errors import UsageError
from attnbench.runs.e2e_trace import read_trace as read_request_trace
from attnbench.traces.files import base_suffix, numbered_lines, read_text
from attnbench.traces.jsonl import read_trace
from attnbench.traces.requests import read_burstgpt, read_timed
from attnbench.traces.vllm_shapes import read_shapes

TRACES = Path(__file__).resolve().parent.parent / "scenarios" / "traces"


def gzipped(source: Path, out: Path) -> Path:
    out.write_bytes(gzip.compress(source.read_bytes()))
    return out


def test_a_gzip_step_trace_reads_as_the_plain_one(tmp_path):
    plain = TRACES / "decode-heavy.jsonl"
    packed = gzipped(plain, tmp_path / "decode-heavy.jsonl.gz")
    assert packed.stat().st_size < plain.stat().st_size / 3
    assert read_trace(packed) == read_trace(plain)


def test_a_gzip_request_trace_reads_as_the_plain_one_whatever_its_name(tmp_path):
    plain = TRACES / "chat-high.requests.jsonl"
    assert read_timed(gzipped(plain, tmp_path / "requests.jsonl.gz")) == read_timed(plain)
    assert read_timed(gzipped(plain, tmp_path / "requests.jsonl")) == read_timed(plain)  # the magic bytes tell


def test_a_gzip_burstgpt_csv_is_read_as_a_csv(tmp_path):
    rows = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" + "".join(
        f"{i * 0.5},ChatGPT,{100 + i},{20 + i},{120 + 2 * i},Conversation log\n" for i in range(6))
    plain = tmp_path / "burst.csv"
    plain.write_text(rows + "3.5,ChatGPT,50,0,50,Conversation log\n")
    packed = gzipped(plain, tmp_path / "burst.csv.gz")
    assert base_suffix(packed) == ".csv" and base_suffix(tmp_path / "t.JSONL.GZ") == ".jsonl"
    assert read_burstgpt(packed) == read_burstgpt(plain)
    trace = read_request_trace(packed, None)
    assert len(trace.requests) == 6 and trace.skipped == 1 and "BurstGPT" in trace.format


def test_a_gzip_shapes_file_is_read_by_its_inner_suffix(tmp_path):
    shapes = {"cases": [{"name": "mix", "requests": [{"query_len": 1, "kv_len": 512, "count": 4},
                                                     {"query_len": 64, "kv_len": 1024}]}]}
    plain = tmp_path / "shapes.json"
    plain.write_text(json.dumps(shapes))
    assert read_shapes(gzipped(plain, tmp_path / "shapes.json.gz")) == read_shapes(plain)


def test_what_it_decompresses_to_is_held_to_the_limit(tmp_path):
    bomb = tmp_path / "bomb.jsonl.gz"
    bomb.write_bytes(gzip.compress(b'{"timestamp": 0, "input_length": 1, "output_length": 1}\n' * 2000))
    assert bomb.stat().st_size < 1000
    with pytest.raises(UsageError, match="decompresses to more than 1000 bytes"):
        list(numbered_lines(bomb, "request trace", limit=1000))
    one_line = tmp_path / "one-line.gz"
    one_line.write_bytes(gzip.compress(b"x" * 10_000_000))  # no newline: the line itself is bounded
    assert one_line.stat().st_size < 20_000
    with pytest.raises(UsageError, match="decompresses to more than 20000 bytes"):
        list(numbered_lines(one_line, "step trace", limit=20_000))
    with pytest.raises(UsageError, match="decompresses to more than 20000 bytes"):
        read_text(one_line, "shapes file", limit=20_000)


def test_a_broken_gzip_file_is_one_line_naming_it(tmp_path):
    whole = gzip.compress((TRACES / "chat-high.requests.jsonl").read_bytes())
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(UsageError, match=r"cut\.jsonl\.gz: the request trace is not a readable gzip file"):
        read_timed(cut)
    garbled = tmp_path / "garbled.jsonl.gz"
    garbled.write_bytes(whole[:10] + bytes(200) + whole[210:])
    with pytest.raises(UsageError, match="not a readable gzip file"):
        read_trace(garbled)


def test_the_cli_summarises_a_gzip_trace(tmp_path):
    """Names of one length, so that the two summaries wrap alike and differ only by the name."""
    plain = tmp_path / "a.jsonl"
    plain.write_bytes((TRACES / "prefix-heavy.jsonl").read_bytes())
    packed = gzipped(plain, tmp_path / "b.jsonl")
    runs = [CliRunner().invoke(app, ["trace", "summary", str(path)]) for path in (plain, packed)]
    assert [r.exit_code for r in runs] == [0, 0], runs[1].output
    assert runs[1].output.replace("b.jsonl", "a.jsonl") == runs[0].output
