"""plot, export and compare given an `attnbench atlas` run (issue 22): plot redraws the atlas's own
pictures, byte for byte, in its directory or in --out; export writes its cells table and its
summary as the atlas wrote them; nothing else in the directory changes; compare pairs two
atlases' cells, judges each choice as compare judges a row pair and lists moved winners (on the
CPU run's rows relabelled as a GPU's, one choice made slower and one winner moved)."""

from __future__ import annotations

import shutil

import pandas as pd
from bad_input_cli import invoke

pytest_plugins = ["atlas_fixtures"]


def pictures(root) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.glob("*.png"))}


def test_plot_redraws_the_atlas_pictures_in_place_and_leaves_every_other_file(snapshot, atlas):
    before = snapshot(atlas)
    for name in pictures(atlas):
        (atlas / name).unlink()
    result = invoke("plot", atlas)
    assert result.exit_code == 0, result.output
    assert snapshot(atlas) == before  # the same picture files, byte for byte; the tables untouched
    assert sorted(line.rsplit("/", 1)[-1] for line in result.stdout.split()) == sorted(pictures(atlas))


def test_plot_out_draws_the_same_pictures_elsewhere(snapshot, atlas, tmp_path):
    before = snapshot(atlas)
    result = invoke("plot", atlas / "results.csv", "--out", tmp_path / "plots")
    assert result.exit_code == 0, result.output
    assert pictures(tmp_path / "plots") == pictures(atlas)
    assert snapshot(atlas) == before


def test_export_writes_the_cells_table_and_the_summary_as_the_atlas_did(atlas, tmp_path):
    for fmt, written in (("csv", "cells.csv"), ("md", "summary.md")):
        result = invoke("export", atlas, "--format", fmt, "--out", tmp_path / f"atlas.{fmt}")
        assert result.exit_code == 0, result.output
        assert (tmp_path / f"atlas.{fmt}").read_bytes() == (atlas / written).read_bytes()
    shown = invoke("export", atlas, "--format", "csv")
    assert shown.exit_code == 0 and shown.stdout == (atlas / "cells.csv").read_text()


def _as_gpu(atlas, slower: str = "", factor: float = 1.0) -> None:
    """The atlas's rows as a GPU's; `slower`'s times (median, spread, samples) times `factor`."""
    rows = pd.read_csv(atlas / "results.csv", dtype=str, keep_default_na=False)
    rows["device"] = "cuda:0"
    chosen = (rows["backend"] + " " + rows["strategy"]) == slower
    for column in ("median_ms", "p10_ms", "p90_ms"):
        rows.loc[chosen, column] = [str(float(v) * factor) for v in rows.loc[chosen, column]]
    rows.loc[chosen, "samples_ms"] = [" ".join(str(float(t) * factor) for t in v.split())
                                      for v in rows.loc[chosen, "samples_ms"]]
    rows.to_csv(atlas / "results.csv", index=False)


def test_compare_of_two_atlases_finds_the_slower_choice_and_the_moved_winner(atlas, tmp_path):
    new = tmp_path / "new"
    shutil.copytree(atlas, new)
    _as_gpu(atlas)
    _as_gpu(new, "reference split", 1.5)
    cells = pd.read_csv(new / "cells.csv", dtype={"winner": object})
    cells.loc[0, "winner"] = "reference unified"
    cells.to_csv(new / "cells.csv", index=False)
    result = invoke("compare", atlas, new, "--markdown", tmp_path / "compare.md")
    assert result.exit_code == 1, result.output
    assert "4 cells paired" in result.stdout and "winner changed in 1" in result.stdout
    report = (tmp_path / "compare.md").read_text()
    assert "| reference split | 4 | 1.5" in report and "| reference unified | 4 | 1" in report


def test_compare_of_cpu_atlases_gives_no_verdict(atlas):
    result = invoke("compare", atlas, atlas / "results.csv")
    assert result.exit_code == 0, result.output
    assert "no verdicts" in result.stdout and "winner changed in 0" in result.stdout
