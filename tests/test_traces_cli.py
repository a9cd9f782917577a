"""`attnbench trace` end to end on the CPU: each subcommand writes what it says, --force replaces only
what attnbench wrote, and every sample trace in scenarios/traces is rebuilt byte for byte by the
command its README gives."""

from __future__ import annotations

import gzip
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from bad_input_cli import invoke

from attnbench.traces.jsonl import read_trace
from attnbench.traces.requests import read_timed
from attnbench.traces.steps import Request as R

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "scenarios" / "traces"
COMMANDS = [shlex.split(line)[1:] for line in (SAMPLES / "README.md").read_text().splitlines()
            if line.startswith("attnbench trace ")]


def out_of(argv: list[str]) -> str:
    return argv[argv.index("--out") + 1]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: Path(out_of(argv)).name)
def test_a_sample_is_rebuilt_by_its_command(argv, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the commands name their inputs from the repository root, as the README says
    shipped = ROOT / out_of(argv)
    assert shipped.stat().st_size < 200_000, f"{shipped.name} is past the 200 KB a sample may take"
    fresh = tmp_path / shipped.name
    argv = [str(fresh) if a == out_of(argv) else a for a in argv]
    result = invoke(*argv)
    assert result.exit_code == 0, result.output
    assert text_of(fresh) == text_of(shipped)


def text_of(path: Path) -> bytes:
    """A sample's bytes; a .gz sample's once decompressed (another zlib may compress them otherwise)."""
    data = path.read_bytes()
    return gzip.decompress(data) if path.name.endswith(".gz") else data


def test_every_sample_file_has_its_command():
    made = {Path(out_of(argv)).name for argv in COMMANDS}
    assert made == {p.name for p in SAMPLES.glob("*.jsonl*")}


def test_an_out_ending_in_gz_is_written_compressed_and_the_same_every_time(tmp_path):
    argv = ["trace", "requests", "--num-requests", "5", "--rate", "2", "--seed", "0"]
    for name in ("a.jsonl", "b.jsonl.gz", "c.jsonl.gz"):
        assert invoke(*argv, "--out", tmp_path / name).exit_code == 0
    assert (tmp_path / "b.jsonl.gz").read_bytes()[:2] == b"\x1f\x8b"
    assert (tmp_path / "b.jsonl.gz").read_bytes() == (tmp_path / "c.jsonl.gz").read_bytes()
    assert gzip.decompress((tmp_path / "b.jsonl.gz").read_bytes()) == (tmp_path / "a.jsonl").read_bytes()


def test_convert_writes_a_trace_with_its_shape_and_cases(tmp_path):
    out = tmp_path / "t.jsonl"
    result = invoke("trace", "convert", "--case", "a=2*1@100,64@64c", "--case", "b=3:2", "--heads", "32",
                    "--kv-heads", "8", "--dim", "128", "--dtype", "fp16", "--out", out)
    assert result.exit_code == 0, result.output
    assert "2 steps" in result.stdout
    trace = read_trace(out)
    assert trace.header.shape.as_dict() == {"num_heads": 32, "num_kv_heads": 8, "head_dim": 128, "dtype": "float16"}
    assert trace.header.generator == {"cases": ["a", "b"]}
    assert trace.steps[0].requests == (R(1, 100), R(1, 100), R(64, 64, chunked=True))
    assert trace.steps[1].requests == (R(3, 3, num_draft_tokens=2),)


def test_force_replaces_a_trace_attnbench_wrote(tmp_path):
    out = tmp_path / "t.jsonl"
    assert invoke("trace", "convert", "--batch-spec", "q2k", "--out", out).exit_code == 0
    assert invoke("trace", "convert", "--batch-spec", "q1k", "--out", out, "--force").exit_code == 0
    assert read_trace(out).steps[0].requests == (R(1024, 1024),)


def test_a_step_trace_converts_to_itself_with_a_shape_added(tmp_path):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert invoke("trace", "convert", "--batch-spec", "4q1kv2k_q300", "--out", first).exit_code == 0
    assert invoke("trace", "convert", "--steps", first, "--heads", "8", "--out", second).exit_code == 0
    assert read_trace(second).steps == read_trace(first).steps
    assert read_trace(second).header.shape.num_heads == 8
    third = tmp_path / "c.jsonl"
    assert invoke("trace", "convert", "--steps", second, "--block-size", "32", "--out", third).exit_code == 0
    assert read_trace(third).header.shape.as_dict() == {"num_heads": 8, "block_size": 32}  # a flag adds to the header


def test_requests_then_convert_equals_synth(tmp_path):
    """A request trace written and read back schedules into the same steps as synth makes directly."""
    flags = ["--num-requests", "30", "--rate", "5", "--input-len", "uniform:10:900", "--output-len", "20",
             "--seed", "7"]
    requests, steps, direct = tmp_path / "r.jsonl", tmp_path / "s.jsonl", tmp_path / "d.jsonl"
    assert invoke("trace", "requests", *flags, "--out", requests).exit_code == 0
    assert len(read_timed(requests)) == 30
    assert invoke("trace", "convert", "--timed-trace", requests, "--out", steps).exit_code == 0
    assert invoke("trace", "synth", *flags, "--out", direct).exit_code == 0
    assert read_trace(steps).steps == read_trace(direct).steps
    assert read_trace(direct).header.synthesized and not read_trace(steps).header.synthesized


def test_burstgpt_converts_and_counts_what_it_skipped(tmp_path):
    csv = tmp_path / "b.csv"
    csv.write_text("Timestamp,Request tokens,Response tokens\n0,100,3\n0.01,50,0\n0.02,20,2\n")
    out = tmp_path / "t.jsonl"
    assert invoke("trace", "convert", "--burstgpt", csv, "--out", out).exit_code == 0
    generator = read_trace(out).header.generator
    assert generator["requests"] == {"count": 2, "skipped_no_response": 1}
    assert generator["finished"] == 2


def test_summary_prints_kinds_and_distributions():
    result = invoke("trace", "summary", SAMPLES / "decode-heavy.jsonl")
    assert result.exit_code == 0, result.output
    counts = {kind: int(n) for kind, n in re.findall(r"│ (decode|prefill|mixed)\s*│\s*(\d+)", result.stdout)}
    trace = read_trace(SAMPLES / "decode-heavy.jsonl")
    assert counts == {kind: trace.kinds().get(kind, 0) for kind in ("decode", "prefill", "mixed")}
    assert "kv_len of decode rows" in result.stdout and "synthesized" in result.stdout


def test_the_header_records_the_scheduler(tmp_path):
    out = tmp_path / "t.jsonl"
    assert invoke("trace", "synth", "--num-requests", "5", "--max-num-seqs", "3", "--out", out).exit_code == 0
    header = json.loads(out.read_text().splitlines()[0])
    assert header["generator"]["scheduler"]["max_num_seqs"] == 3
    assert header["generator"]["requests"]["input_len"] == "lognormal:600:0.8"


def test_subcommand_help_and_usage_errors_import_nothing_heavy(tmp_path):
    """As tests/test_cli_startup.py checks for the top-level commands: a fresh interpreter, and the
    heavy modules in sys.modules after each invocation."""
    argvs = [["trace", name, "--help"] for name in ("convert", "synth", "requests", "summary")]
    argvs += [["trace", "synth", "--rate", "-1", "--out", str(tmp_path / "o.jsonl")],
              ["trace", "convert", "--case", "a=x", "--out", str(tmp_path / "o.jsonl")]]
    script = (f"import contextlib, io, sys\nfrom attnbench.cli.main import main\nfor argv in {argvs!r}:\n"
              "    sys.argv = ['attnbench', *argv]\n"
              "    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
              "        try:\n            main()\n        except SystemExit:\n            pass\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'pandas', 'matplotlib', 'numpy')))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
