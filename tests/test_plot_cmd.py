"""`attnbench plot`: PNGs redrawn from saved results, several runs overlaid and labelled."""

from __future__ import annotations

import pandas as pd
import pytest

from attnbench.results import export
from attnbench.results import files as report

pytest_plugins = ["results_fixtures"]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def shape_names(df: pd.DataFrame) -> set[str]:
    timed = df[df["verdict"].isin(["pass", "fail"])]
    return {f"h{h}" + (f"kv{kv}" if kv != h else "") + f"_d{d}"
            for h, kv, d in timed[["num_heads", "num_kv_heads", "head_dim"]].drop_duplicates().itertuples(index=False)}


def test_one_run_redraws_a_latency_plot_per_shape(results_dir, tmp_path, cli):
    result = cli("plot", results_dir, "--out", tmp_path)
    assert result.exit_code == 0, result.output
    drawn = sorted(tmp_path.glob("*.png"))
    assert {p.stem.removeprefix("latency_") for p in drawn if p.stem.startswith("latency_")} == \
        shape_names(report.load_results(results_dir))
    for png in drawn:
        assert png.read_bytes().startswith(PNG_MAGIC)
        assert str(png) in result.output


def test_several_runs_are_overlaid_under_their_labels(cpu_run, tmp_path, monkeypatch, cli):
    drawn = {}

    def spy(runs, out_dir):
        drawn.update(runs=[(label, len(df)) for label, df in runs], out=out_dir)
        return [out_dir / "latency_x.png"]

    monkeypatch.setattr(export, "plot_runs", spy)
    rows = len(report.load_results(cpu_run))
    result = cli("plot", cpu_run, cpu_run / "results.csv", "--label", "h100", "--label", "h200", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    assert drawn == {"runs": [("h100", rows), ("h200", rows)], "out": tmp_path}


def test_labels_default_to_directory_names_and_settings_split_lines(cpu_run, tmp_path, monkeypatch, cli):
    other = tmp_path / "longer-context"
    other.mkdir()
    df = report.load_results(cpu_run)
    two = pd.concat([df, df.assign(context=64)], ignore_index=True)
    (other / "results.csv").write_text(two.reindex(columns=report.COLUMNS).to_csv(index=False))
    seen = []
    monkeypatch.setattr(export, "plot_runs", lambda runs, out: seen.extend(label for label, _ in runs) or [out])
    assert cli("plot", cpu_run, other, "--out", tmp_path / "plots").exit_code == 0
    assert seen == [cpu_run.name, "longer-context ctx=32", "longer-context ctx=64"]


@pytest.mark.parametrize("args, message", [
    (["--label", "only-one"], "--label: got 1 label(s) for 2 results"),
])
def test_bad_labels_are_refused(cpu_run, args, message, cli, tmp_path):
    result = cli("plot", cpu_run, cpu_run, *args, "--out", tmp_path)
    assert result.exit_code == 1
    assert result.output.startswith("error: " + message)


def test_a_missing_run_is_refused(tmp_path, cli):
    result = cli("plot", tmp_path / "nope", "--out", tmp_path)
    assert result.exit_code == 1
    assert "does not exist" in result.output
