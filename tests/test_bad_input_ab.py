"""Bad input to `attnbench ab`: each is one `error:` line, exit 1, no traceback, and nothing under
the working directory written, removed or changed (a refused --out keeps what it held)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bad_input_cli import SCENARIO, assert_one_error_line, invoke
from test_bad_input_verdicts import snapshot

KERNEL_FLAGS = ["--heads", "2", "--dim", "16", "--tokens", "4", "--context", "16", "--kind", "decode",
                "--device", "cpu", "--budget-ms", "5", "--backend", "reference"]
A, B = "AB_SIDE=a", "AB_SIDE=b"


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A working directory with a run directory that holds a file, a file, a folder that is not a
    checkout, an e2e scenario and a kernel scenario."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "ab.csv").write_text("kept\n")
    (tmp_path / "file.txt").write_text("x\n")
    (tmp_path / "notsrc").mkdir()
    (tmp_path / "e2e.toml").write_text('command = "e2e"\nmodel = "tiny"\n')
    (tmp_path / "k.toml").write_text(SCENARIO)
    return tmp_path


CASES = {
    "no equals sign": (["--baseline", "python", "--candidate", B], "--baseline"),
    "empty value": (["--baseline", "python=", "--candidate", B], "--baseline"),
    "unknown key": (["--baseline", "venv=/x", "--candidate", B], "unknown key"),
    "lower-case variable": (["--baseline", "ab_side=a", "--candidate", B], "unknown key"),
    "empty side": (["--baseline", ",", "--candidate", B], "--baseline: empty"),
    "missing python": (["--baseline", "python=/no/such/python", "--candidate", B], "no such file"),
    "python is a folder": (["--baseline", "python=notsrc", "--candidate", B], "not an executable"),
    "python not executable": (["--baseline", "python=file.txt", "--candidate", B], "not an executable"),
    "src missing": (["--baseline", A, "--candidate", "src=/no/such/dir"], "not a directory"),
    "src is a file": (["--baseline", A, "--candidate", "src=file.txt"], "not a directory"),
    "src not a checkout": (["--baseline", A, "--candidate", "src=notsrc"], "not an attnbench checkout"),
    "PYTHONPATH missing folder": (["--baseline", "PYTHONPATH=/no/such/dir", "--candidate", B], "no such folder"),
    "PYTHONPATH a file": (["--baseline", A, "--candidate", "PYTHONPATH=file.txt"], "not a folder"),
    "PYTHONPATH one bad entry": (["--baseline", A, "--candidate", "PYTHONPATH=notsrc:/no/such"], "/no/such"),
    "PYTHONPATH garbage": (["--baseline", "PYTHONPATH=\x01%%garbage", "--candidate", B], "PYTHONPATH"),
    "same sides": (["--baseline", A, "--candidate", A], "--baseline/--candidate"),
    "same checkout, default python": (["--baseline", f"src={Path(__file__).parent.parent}",
                                       "--candidate", f"python={sys.executable}"], "--baseline/--candidate"),
    "bad threshold": (["--baseline", A, "--candidate", B, "--threshold", "two"], "--threshold"),
    "threshold 100%": (["--baseline", A, "--candidate", B, "--threshold", "100%"], "--threshold"),
    "one round": (["--baseline", A, "--candidate", B, "--max-rounds", "1"], "--max-rounds"),
    "min above max": (["--baseline", A, "--candidate", B, "--min-rounds", "5", "--max-rounds", "4"], "--min-rounds"),
    "zero budget": (["--baseline", A, "--candidate", B, "--budget-s", "0"], "--budget-s"),
    "nan budget": (["--baseline", A, "--candidate", B, "--budget-s", "nan"], "--budget-s"),
    "non-empty out": (["--baseline", A, "--candidate", B, "--out", "old"], "not empty"),
    "out is a file": (["--baseline", A, "--candidate", B, "--out", "file.txt"], "--out"),
    "replicates": (["--baseline", A, "--candidate", B, "--replicates", "3"], "--replicates"),
    "shard": (["--baseline", A, "--candidate", B, "--shard", "0/2"], "--shard"),
    "devices": (["--baseline", A, "--candidate", B, "--devices", "cpu,cpu"], "--devices"),
    "profile": (["--baseline", A, "--candidate", B, "--profile"], "--profile"),
    "json": (["--baseline", A, "--candidate", B, "--json"], "--json"),
    "unknown kernel flag": (["--baseline", A, "--candidate", B, "--bogus", "1"], "bogus"),
    "bad kernel value": (["--baseline", A, "--candidate", B, "--heads", "0"], "--heads"),
    "scenario as an argument": (["--baseline", A, "--candidate", B, "k.toml"], "--scenario k.toml"),
    "missing scenario": (["--baseline", A, "--candidate", B, "--scenario", "none.toml"], "none.toml"),
    "e2e scenario": (["--baseline", A, "--candidate", B, "--scenario", "e2e.toml"], "kernel sweeps"),
    "missing --candidate": (["--baseline", A], "--candidate"),
}


@pytest.mark.parametrize("name", CASES)
def test_bad_input_is_one_line(here, name):
    args, named = CASES[name]
    flags = [] if "--heads" in args or "--scenario" in args or "k.toml" in args else KERNEL_FLAGS
    before = snapshot(here)
    assert_one_error_line(invoke("ab", *args, *flags), named)
    assert snapshot(here) == before


def test_a_side_whose_worker_cannot_start(here):
    """An interpreter that is not Python: its worker never says it is ready; one line, nothing else written."""
    before = snapshot(here)
    line = assert_one_error_line(invoke("ab", "--baseline", "python=/bin/false", "--candidate", B, "--out", "new",
                                        *KERNEL_FLAGS), "--baseline")
    assert "did not start" in line or "could not start" in line or "exited" in line, line
    assert list((here / "new").iterdir()) == [] if (here / "new").exists() else True
    assert {k: v for k, v in snapshot(here).items() if not k.startswith("new")} == before
