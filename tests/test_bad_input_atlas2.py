"""Bad input that shared same-step cells open to `attnbench atlas --resume`: a results.csv edited
in its measured_as column or in a copied row, or made before the column existed. An edit that makes
a row no cell of the atlas is one `error:` line, exit 1, nothing changed; one that only renames or
blanks what a copy says it shares is read as it stands (no traceback, no row lost)."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from bad_input_cli import assert_one_error_line, invoke
from test_atlas2 import SHARED


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("bad-atlas2") / "run"
    assert invoke(*SHARED, "--out", out).exit_code == 0
    return out


def edited(finished, tmp_path, change) -> tuple:
    run = tmp_path / "copy"
    shutil.copytree(finished, run)
    rows = pd.read_csv(run / "results.csv", dtype=str, keep_default_na=False)
    rows = change(rows)
    rows.to_csv(run / "results.csv", index=False)
    return run, rows


def copied(rows: pd.DataFrame) -> pd.Series:
    return rows["measured_as"] != ""


def garbage_source(rows):
    rows.loc[copied(rows), "measured_as"] = "decode_share=banana"
    return rows


def numeric_source(rows):
    rows.loc[copied(rows), "measured_as"] = "5"
    return rows


def source_rows_removed(rows):
    measured = rows.index[~copied(rows) & (rows["cell_decode_share"] == "0.0")]
    return rows.drop(measured)


def column_removed(rows):
    return rows.drop(columns="measured_as")


def copies_blanked(rows):
    rows["measured_as"] = ""
    return rows


READ_AS_IS = {"garbage in measured_as": garbage_source, "a number in measured_as": numeric_source,
              "the measured cell's rows removed": source_rows_removed,
              "an atlas made before measured_as": column_removed, "every copy marked measured": copies_blanked}


@pytest.mark.parametrize("case", list(READ_AS_IS))
def test_an_edited_measured_as_is_read_as_it_stands(finished, tmp_path, case):
    run, rows = edited(finished, tmp_path, READ_AS_IS[case])
    result = invoke(*SHARED, "--resume", run)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    again = pd.read_csv(run / "results.csv", dtype=str, keep_default_na=False)
    kept = again[list(rows.columns.drop("measured_as", errors="ignore"))].merge(
        rows[list(rows.columns.drop("measured_as", errors="ignore"))], how="inner")
    assert len(kept) == len(rows)  # every row it had is still there
    assert len(pd.read_csv(run / "cells.csv")) == 8


def off_the_axes(rows):
    rows.loc[rows.index[copied(rows)][0], "cell_decode_context"] = "24"
    return rows


def point_of_another_cell(rows):
    first = rows.index[copied(rows)][0]
    rows.loc[first, "seed"] = rows.loc[rows.index[~copied(rows)][0], "seed"]
    return rows


REFUSED = {"a copied row off the axes": (off_the_axes, "results.csv row"),
           "a copied row with another cell's point": (point_of_another_cell, "--resume")}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_copied_row_that_is_no_cell_of_the_atlas_is_refused_and_nothing_changes(finished, tmp_path, case):
    change, words = REFUSED[case]
    run, _ = edited(finished, tmp_path, change)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert_one_error_line(invoke(*SHARED, "--resume", run), words)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
