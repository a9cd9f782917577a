"""Bad input to `attnbench atlas`: each is one `error:` line naming what is wrong, exit 1, no
traceback, and nothing in an existing directory lost or changed (a refused resume included)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bad_input_cli import assert_one_error_line, invoke

BASE = ["atlas", "--decode-share", "0.5", "--decode-context", "16", "--chunk", "8", "--head-dim", "32",
        "--gqa-group", "4", "--heads", "8", "--tokens", "4:8:2", "--budget-ms", "2", "--device", "cpu"]


def with_flag(flag: str, value: str) -> list[str]:
    argv = list(BASE)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
        return argv
    return argv + [flag, value]


FLAGS = {  # (flag, value) -> words the error line holds
    ("--tokens", "0:10"): "--tokens",
    ("--tokens", "10:5"): "--tokens",
    ("--tokens", "a:b"): "--tokens",
    ("--tokens", "1:2:3:4"): "--tokens",
    ("--tokens", "4:16:1"): "--tokens: COUNT",
    ("--tokens", "4:16:999"): "--tokens: COUNT",
    ("--decode-share", "0:2"): "--decode-share",
    ("--decode-share", "nan"): "--decode-share",
    ("--decode-share", "0.333"): "--decode-share: 0.333 is not a value",
    ("--head-dim", "100"): "--head-dim: 100 is not a value",
    ("--gqa-group", "3"): "--gqa-group: 3 is not a value",
    ("--heads", "0"): "--heads",
    ("--tokens", "8"): "every axis is fixed",
    ("--max-cells", "0"): "--max-cells",
    ("--max-cells", "1"): "--max-cells: the coarse grid has 2 cells",
    ("--mode", "both"): "--mode",
    ("--strategy", "bogus"): "--strategy",
    ("--budget-ms", "-1"): "--budget-ms",
    ("--replicates", "0"): "--replicates",
    ("--backend", "fa9"): "--backend",
}


@pytest.mark.parametrize("flag, value", list(FLAGS), ids=lambda v: str(v))
def test_a_bad_flag_is_one_line_and_writes_nothing(tmp_path, flag, value):
    out = tmp_path / "out"
    assert_one_error_line(invoke(*with_flag(flag, value), "--out", out), FLAGS[(flag, value)])
    assert not out.exists()


def snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("bad-atlas") / "run"
    result = invoke(*BASE, "--out", out)
    assert result.exit_code == 0, result.output
    return out


def copy_of(run: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(run, target)
    return target


def edit_env(run: Path, change) -> None:
    env = json.loads((run / "env.json").read_text())
    change(env)
    (run / "env.json").write_text(json.dumps(env))


def edit_rows(run: Path, old: str, new: str) -> None:
    text = (run / "results.csv").read_text()
    (run / "results.csv").write_text(text.replace(old, new, 1))


RESUMES = {  # a damaged or foreign directory -> (how to damage it, extra argv, words of the error line)
    "other axes": (None, ["--decode-context", "32"], "--decode-context 16:16:1 there"),
    "another command": (lambda r: edit_env(r, lambda e: e["sweep"].update(command="kernel")), [],
                        "made by `attnbench kernel`"),
    "a row off the axes": (lambda r: edit_rows(r, "\n0,0.5,16,", "\n0,0.7,16,"), [], "results.csv row 1"),
    "a row without coordinates": (lambda r: edit_rows(r, "\n0,0.5,16,", "\n0,x,16,"), [], "results.csv row 1"),
    "no results.csv": (lambda r: (r / "results.csv").unlink(), [], "holds no results.csv"),
    "resume and another out": (None, ["--out", "elsewhere"], "--resume/--out"),
}


@pytest.mark.parametrize("case", list(RESUMES))
def test_a_refused_resume_changes_nothing(finished, tmp_path, case):
    damage, extra, words = RESUMES[case]
    run = copy_of(finished, tmp_path)
    if damage:
        damage(run)
    before = snapshot(run)
    argv = list(BASE)
    for flag, value in zip(extra[::2], extra[1::2]):
        argv = argv + [flag, value] if flag not in argv else with_flag(flag, value)
    assert_one_error_line(invoke(*argv, "--resume", run), words)
    assert snapshot(run) == before


def test_an_out_that_is_a_file_or_holds_a_run_is_refused_and_kept(finished, tmp_path):
    afile = tmp_path / "file"
    afile.write_text("mine")
    assert_one_error_line(invoke(*BASE, "--out", afile), "is a file")
    assert afile.read_text() == "mine"
    before = snapshot(finished)
    assert_one_error_line(invoke(*BASE, "--out", finished), "is not empty")
    assert snapshot(finished) == before
    assert_one_error_line(invoke(*BASE, "--resume", tmp_path / "nowhere"), "--resume")
