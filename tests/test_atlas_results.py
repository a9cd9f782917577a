"""plot, export and merge given an `attnbench atlas` run (issue 22): plot redraws the atlas's own
pictures, byte for byte, in its directory or in --out; export writes its cells table and its
summary as the atlas wrote them; nothing else in the directory changes."""

from __future__ import annotations

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
