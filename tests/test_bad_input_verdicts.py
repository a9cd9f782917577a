"""Bad input to compare and calibrate (issue 20): each is one `error:` line, exit 1, no traceback,
and nothing written, removed or changed (calibrate makes no --out and starts no run).

The runs are synthetic directories (tests/test_verdicts.py's run_dir)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bad_input_cli import SCENARIO, SETTINGS, assert_one_error_line, invoke
from test_verdicts import E2E_ROW, ENVS, run_dir, run_rows



def snapshot(root: Path) -> dict[str, str]:
    """Every path under root, with a digest of each file's bytes and its mode."""
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            + oct(p.stat().st_mode) for p in sorted(root.rglob("*"))}


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """A GPU-labelled kernel pair, an e2e run and a kernel scenario in tmp_path (the working directory);
    a command that starts a subprocess (a calibrate run) fails the test."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail(f"a run started: {a}"))
    run_dir(tmp_path / "base", run_rows("cuda", 1, spread=0.01), ENVS["cuda"])
    run_dir(tmp_path / "new", run_rows("cuda", 2, spread=0.01), ENVS["cuda"])
    (tmp_path / "e2e").mkdir()
    pd.DataFrame([E2E_ROW]).to_csv(tmp_path / "e2e" / "results.csv", index=False)
    (tmp_path / "k.toml").write_text(SCENARIO)
    return tmp_path


def refused(root: Path, args: list, named: str) -> None:
    """`attnbench *args` in root: one error line naming `named`, exit 1, root unchanged."""
    before = snapshot(root)
    line = assert_one_error_line(invoke(*args), named)
    assert snapshot(root) == before, line


THRESHOLDS = ["", " ", "nan", "NaN%", "inf", "-inf", "-5%", "-0.01", "100%", "1", "150%", "5%%", "%", "1e999",
              "five", "0x10", "5 %%", "0.05.1"]


@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_compare_refuses_a_threshold_that_is_no_fraction_below_one(runs, threshold):
    refused(runs, ["compare", "base", "new", "--threshold", threshold], "--threshold")


@SETTINGS
@given(text=st.text(max_size=8))
def test_compare_refuses_any_threshold_text_that_is_not_a_fraction_in_range(runs, text):
    try:
        raw = text.strip()
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        value = None
    if value is not None and 0 <= value < 1:
        return  # a valid threshold: not this property's input
    refused(runs, ["compare", "base", "new", f"--threshold={text}"], "--threshold")


@pytest.mark.parametrize("args, named", [
    (["compare", "base", "e2e"], "one kind"),
    (["compare", "e2e", "base"], "one kind"),
    (["compare", "base", "nope"], "NEW"),
    (["compare", "nope", "new"], "BASE"),
    (["compare", "base", "base/env.json"], "NEW"),
    (["compare", "base", "k.toml"], "NEW"),
    (["compare", "base", "new", "--ignore", ""], "--ignore"),
    (["compare", "base", "new", "--ignore", "median_ms"], "--ignore"),
    (["compare", "base", "new", "--ignore", "kind"], "share a configuration key"),
    (["compare", "e2e", "e2e", "--ignore", "num_tokens"], "--ignore"),
    (["compare", "base", "new", "--markdown", "base/results.csv"], "--markdown"),
    (["compare", "base", "new", "--markdown", "new"], "--markdown"),
    (["compare", "base", "new", "--bogus"], "--bogus"),
    (["compare", "base"], "Missing argument"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_compare_refuses_inputs_it_cannot_judge(runs, args, named):
    refused(runs, args, named)


@pytest.mark.parametrize("column, value", [("median_ms", "nan"), ("median_ms", "-1"), ("p90_ms", "0.0001"),
                                           ("replicate_medians_ms", "1 nan"), ("samples_ms", "0 1")])
def test_compare_refuses_a_new_run_with_a_bad_timing(runs, column, value):
    df = pd.read_csv(runs / "new" / "results.csv", dtype=str)
    df.loc[0, column] = value
    df.to_csv(runs / "new" / "results.csv", index=False)
    refused(runs, ["compare", "base", "new"], column)


@pytest.mark.parametrize("args, named", [
    (["calibrate"], "SCENARIO_OR_FLAGS"),
    (["calibrate", "--out", "cal"], "SCENARIO_OR_FLAGS"),
    (["calibrate", "nope.toml", "--out", "cal"], "no such scenario"),
    (["calibrate", "k.toml", "--resume", "base", "--out", "cal"], "--resume"),
    (["calibrate", "--heads", "4", "--dim", "32", "--force", "--out", "cal"], "--force"),
    (["calibrate", "k.toml", "--tokens", "0", "--out", "cal"], "--tokens"),
    (["calibrate", "k.toml", "--bogus", "1", "--out", "cal"], "--bogus"),
    (["calibrate", "--heads", "4", "--dim", "32", "--tokens", "0", "--out", "cal"], "--tokens"),
    (["calibrate", "--heads", "nan", "--dim", "32", "--out", "cal"], "--heads"),
    (["calibrate", "--heads", "4", "--dim", "32", "--threshold", "150%", "--out", "cal"], "--threshold"),
    (["calibrate", "base", "--out", "cal"], "base"),
    (["calibrate", "k.toml", "--out", "base"], "--out"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_calibrate_refuses_before_any_run(runs, args, named):
    refused(runs, args, named)
    assert not (runs / "cal").exists()


@pytest.mark.parametrize("name, text, named", [
    ("e2e.toml", 'command = "e2e"\nmodel = "tiny"\n', "calibrate takes kernel sweeps"),
    ("verify.toml", 'command = "verify"\n', "command"),
    ("broken.toml", 'command = "kernel"\nheads = \n', "TOML"),
    ("empty.toml", "", "empty"),
    ("typo.toml", 'command = "kernel"\nhead = 4\n', "head"),
])
def test_calibrate_refuses_a_scenario_it_cannot_calibrate(runs, name, text, named):
    (runs / name).write_text(text)
    refused(runs, ["calibrate", name, "--out", "cal"], named)
    assert not (runs / "cal").exists()


@SETTINGS
@given(tokens=st.integers(max_value=0))
def test_calibrate_refuses_any_non_positive_token_count_before_running(runs, tokens):
    refused(runs, ["calibrate", "k.toml", f"--tokens={tokens}", "--out", "cal"], "--tokens")

