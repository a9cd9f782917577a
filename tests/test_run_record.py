"""A run directory records what attnbench wrote, and `--force` removes only that.

The user's own files beside a run (notes, a profile folder, a scenario file) survive `--force`;
a link is unlinked, never followed, whether it stands where a recorded file was or elsewhere.
Resume keys: one implementation for the kernel and the e2e jobs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.runs.rundir import RECORD, ResumeKey, RunDir

KERNEL = ["kernel", "--heads", "4", "--kv-heads", "2", "--dim", "32", "--tokens", "4", "--kind", "decode",
          "--context", "32", "--budget-ms", "3", "--device", "cpu"]


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def recorded(out: Path) -> set[str]:
    return set(json.loads((out / RECORD).read_text())["written"])


def test_a_run_records_the_files_it_wrote(tmp_path):
    out = tmp_path / "run"
    assert invoke(*KERNEL, "--out", out).exit_code == 0
    written = recorded(out)
    assert {"results.csv", "env.json", "summary.md"} <= written
    assert {p.name for p in out.glob("*.png")} <= written and ".attnbench.lock" not in written
    assert written == {p.name for p in out.iterdir()} - {RECORD}


def test_force_leaves_the_users_files_and_follows_no_link(tmp_path):
    out, outside, folder = tmp_path / "run", tmp_path / "outside.md", tmp_path / "elsewhere"
    assert invoke(*KERNEL, "--out", out).exit_code == 0
    outside.write_text("the user's\n")
    folder.mkdir()
    (folder / "keep.txt").write_text("kept\n")
    (out / "notes.png").write_bytes(b"not a plot of ours")
    (out / "profile").mkdir()
    (out / "profile" / "trace.json").write_text("{}")
    (out / "scenario.json").write_text('{"mine": true}')
    (out / "summary.md").unlink()
    (out / "summary.md").symlink_to(outside)  # a link where a recorded file was
    (out / "linked").symlink_to(folder, target_is_directory=True)  # a link attnbench never wrote
    result = invoke(*KERNEL, "--out", out, "--force")
    assert result.exit_code == 0, result.output
    assert (out / "notes.png").read_bytes() == b"not a plot of ours"
    assert (out / "profile" / "trace.json").read_text() == "{}"
    assert (out / "scenario.json").read_text() == '{"mine": true}'
    assert outside.read_text() == "the user's\n" and not (out / "summary.md").is_symlink()
    assert (out / "linked").is_symlink() and (folder / "keep.txt").read_text() == "kept\n"
    assert len(pd.read_csv(out / "results.csv")) == 2
    assert not {"notes.png", "profile", "scenario.json", "linked"} & recorded(out)


def test_a_recorded_folder_replaced_by_a_link_is_unlinked_not_emptied(tmp_path):
    folder = tmp_path / "users"
    folder.mkdir()
    (folder / "data.txt").write_text("mine")
    run = RunDir.prepare(tmp_path / "run")
    with run.locked():
        (run.path / "profile").mkdir()
    assert "profile" in run.written
    (run.path / "profile").rmdir()
    (run.path / "profile").symlink_to(folder, target_is_directory=True)
    RunDir.prepare(run.path, force=True)
    assert not (run.path / "profile").exists() and (folder / "data.txt").read_text() == "mine"


def test_a_folder_that_was_there_is_not_taken_over_by_a_write_inside_it(tmp_path):
    run = RunDir.prepare(tmp_path)
    (tmp_path / "profile").mkdir()
    with run.recording():
        (tmp_path / "profile" / "trace.json").write_text("{}")
        (tmp_path / "new.csv").write_text("a\n")
    assert run.written == {"new.csv"}


def test_one_resume_key_serves_the_kernel_and_the_e2e_jobs():
    kernel = ResumeKey(("kind", "num_tokens"), ("backend", "strategy", "mode"))
    rows = [{"kind": "decode", "num_tokens": "4", "backend": "reference", "strategy": s, "mode": "eager"}
            for s in ("unified", "split")]
    rows += [{"kind": "mixed", "num_tokens": "4", "backend": "reference", "strategy": "unified", "mode": "eager"},
             {"kind": "prefill", "num_tokens": "4", "backend": "reference", "strategy": "", "mode": ""}]
    needed = {("reference", s, "eager") for s in ("unified", "split")}
    assert kernel.completed(rows, needed) == {("decode", "4"), ("prefill", "4")}  # a failed point is finished
    e2e = ResumeKey(("input_len",), ("backend", "strategy"))
    assert e2e.of({"input_len": 6}) == ("6",)
    assert e2e.completed([{"input_len": "6", "backend": "reference", "strategy": "unified"}],
                         {("reference", "unified"), ("reference", "split")}) == set()
