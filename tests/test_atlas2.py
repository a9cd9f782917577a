"""`attnbench atlas` when cells repeat a step and when a signal stops it: same-step cells measured
once and shared (every cell still in cells.csv, saying which cell it shares), the tables written
before the pictures, a second signal held while they are written, a signal during the pictures
leaving every table and no temporary file, and an interrupt message that counts the round's cells."""

from __future__ import annotations

import os
import signal
from dataclasses import replace

import pandas as pd
import pytest

import attnbench.runs.atlas as job
import attnbench.runs.atlas_outputs as outputs
from attnbench.kernels.atlas_axes import NAMES, step_of
from attnbench.runs.atlas_shared import plan_round
from bad_input_cli import invoke

# decode shares 0 and 1 over two decode contexts and two prefill contexts: a prefill-only cell
# (share 0) repeats across the decode context, a decode-only one (share 1) across the prefill context
SHARED = ["atlas", "--decode-share", "0:1:2", "--decode-context", "16:32:2", "--prefill-context", "0:8:2",
          "--chunk", "8", "--head-dim", "32", "--gqa-group", "4", "--heads", "8", "--tokens", "8",
          "--budget-ms", "1", "--device", "cpu"]
TABLES = ("results.csv", "cells.csv", "crossovers.csv", "summary.md", "env.json")


def cell(share, decode_context, prefill_context, tokens=8):
    return (share, decode_context, 8, prefill_context, 4, 32, tokens)


def test_plan_round_measures_one_cell_per_step_and_copies_the_rest():
    coords = [cell(0.0, 16, 0), cell(0.0, 32, 0), cell(1.0, 16, 0), cell(1.0, 16, 8), cell(0.5, 16, 0)]
    plan = plan_round(coords, [])
    assert plan.measure == [cell(0.0, 16, 0), cell(1.0, 16, 0), cell(0.5, 16, 0)]
    assert plan.copies == {cell(0.0, 32, 0): cell(0.0, 16, 0), cell(1.0, 16, 8): cell(1.0, 16, 0)}
    later = plan_round([cell(1.0, 32, 8), cell(0.0, 32, 8)], [cell(1.0, 32, 0)])
    assert later.measure == [cell(0.0, 32, 8)] and later.copies == {cell(1.0, 32, 8): cell(1.0, 32, 0)}
    assert step_of(cell(0.5, 16, 0)) != step_of(cell(0.5, 32, 0))  # a mixed step reads both contexts


def test_same_step_cells_are_measured_once_and_every_cell_is_listed(tmp_path):
    out = tmp_path / "run"
    first = invoke(*SHARED, "--out", out)
    assert first.exit_code == 0, first.output
    assert "round 0: 8 cell(s), 4 measured (4 the same step as another cell" in first.output
    cells = pd.read_csv(out / "cells.csv", keep_default_na=False)
    assert len(cells) == 8
    assert "8 in 1 round(s), 4 measured (4 the same step as a cell measured" in (out / "summary.md").read_text()
    copied = cells[cells["measured_as"] != ""]
    assert len(copied) == 4 and set(copied["decode_share"]) == {0.0, 1.0}
    rows = pd.read_csv(out / "results.csv", keep_default_na=False)
    for line in copied.to_dict("records"):
        source = dict(part.split("=") for part in line["measured_as"].split())
        assert step_of(tuple(float(source[n]) for n in NAMES)) == step_of(tuple(line[n] for n in NAMES))
        mine = rows[(rows["cell_decode_context"] == line["decode_context"]) &
                    (rows["cell_prefill_context"] == line["prefill_context"]) &
                    (rows["cell_decode_share"] == line["decode_share"])]
        theirs = rows[(rows["cell_decode_context"] == float(source["decode_context"])) &
                      (rows["cell_prefill_context"] == float(source["prefill_context"])) &
                      (rows["cell_decode_share"] == float(source["decode_share"])) & (rows["measured_as"] == "")]
        assert list(mine["median_ms"]) == list(theirs["median_ms"]) and len(mine) == 2
        assert mine["seed"].iloc[0] != theirs["seed"].iloc[0]  # each cell keeps its own point
    again = invoke(*SHARED, "--resume", out)  # the copies read as measured cells: nothing is run
    assert again.exit_code == 0 and "round" not in again.output.replace("rounds", ""), again.output


def stop_after_one_point(monkeypatch):
    """The round's sweep measures its first cell, then stops as Ctrl-C stops it."""
    real = job.sweep_into

    def sweep_into(write, plan, *rest):
        real(write, replace(plan, points=plan.points[:1]), *rest)
        return KeyboardInterrupt()
    monkeypatch.setattr(job, "sweep_into", sweep_into)


def test_an_interrupted_round_says_how_many_of_its_cells_it_measured(monkeypatch, tmp_path):
    stop_after_one_point(monkeypatch)
    result = invoke(*SHARED, "--out", tmp_path / "run")
    assert result.exit_code == 130
    assert "interrupted by SIGINT in round 0 after 2 of its 8 cell(s) (2 cell(s) measured in all)" in result.output
    assert all((tmp_path / "run" / name).is_file() for name in TABLES)


def test_a_second_signal_while_the_tables_are_written_is_held_until_they_are(monkeypatch, tmp_path):
    stop_after_one_point(monkeypatch)
    real = outputs.summary_text

    def summary_text(*args):
        os.kill(os.getpid(), signal.SIGINT)  # arrives while cells.csv and crossovers.csv are written
        return real(*args)
    monkeypatch.setattr(outputs, "summary_text", summary_text)
    out = tmp_path / "run"
    result = invoke(*SHARED, "--out", out)
    assert result.exit_code == 130, result.output
    assert all((out / name).is_file() for name in TABLES)
    assert "pictures: 0 drawn, then SIGINT stopped them" in result.output
    assert not list(out.glob("*.png")) and not list(out.glob(".*.tmp"))


@pytest.mark.parametrize("signal_number, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_while_drawing_keeps_every_table_and_leaves_no_temporary_file(monkeypatch, tmp_path,
                                                                              signal_number, code):
    import attnbench.results.atomic as atomic

    real, calls = atomic.os.replace, []

    def replace_then_signal(src, dst):  # the second picture's write is stopped before its rename
        calls.append(dst)
        if str(dst).endswith(".png") and len(calls) > 1 + sum(not str(c).endswith(".png") for c in calls[:-1]):
            os.kill(os.getpid(), signal_number)
        return real(src, dst)
    monkeypatch.setattr(atomic.os, "replace", replace_then_signal)
    out = tmp_path / "run"
    result = invoke(*SHARED, "--out", out)
    assert result.exit_code == code, result.output
    assert "while drawing the pictures (every round done: 8 cell(s))" in result.output
    assert all((out / name).is_file() for name in TABLES)
    assert len(list(out.glob("*.png"))) == 1 and not list(out.glob(".*.tmp"))
    monkeypatch.undo()
    redraw = invoke(*SHARED, "--resume", out)
    assert redraw.exit_code == 0, redraw.output
    assert len(list(out.glob("*.png"))) == 4 and not list(out.glob(".*.tmp"))
