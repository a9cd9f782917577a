"""`attnbench atlas` on the CPU: a small map end to end (tables, pictures, one CPU line, no winner),
a resume that measures only the cells missing, the rule fitted on the atlas agreeing with its
exported rule.py on every cell, and the report's GPU paths (winners, margins, ties, crossovers,
maps) on the CPU run's rows relabelled with synthetic times that cross at a known place."""

from __future__ import annotations

import importlib.util
import json

import pandas as pd
import pytest

from attnbench.kernels.atlas_axes import AXES, NAMES, cell_batch, parse_range
from attnbench.results.atlas_cells import CELL_COLUMNS, cell_table, crossover_table, outcomes
from attnbench.results.atlas_refine import CellOutcome
from attnbench.results.atlas_plots import plot_atlas
from attnbench.results.atlas_report import summary_text
from attnbench.results.rule_fit import walk
from attnbench.results.rule_cells import feature_values
from bad_input_cli import invoke

SMALL = ["atlas", "--decode-share", "0:1:2", "--decode-context", "16", "--chunk", "8", "--head-dim", "32",
         "--gqa-group", "4", "--heads", "8", "--tokens", "4:16:2", "--budget-ms", "2", "--device", "cpu"]
CROSS = 10  # synthetic: below 10 tokens "vllm-fa3 unified" wins, above it "vllm-fa3 split"


@pytest.fixture(scope="module")
def atlas_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("atlas") / "run"
    result = invoke(*SMALL, "--out", out)
    assert result.exit_code == 0, result.output
    return out, result.output


def test_a_cpu_atlas_writes_its_tables_and_pictures_and_names_no_winner(atlas_dir):
    out, output = atlas_dir
    for name in ("results.csv", "cells.csv", "crossovers.csv", "summary.md", "env.json", "atlas_margins.png",
                 "atlas_map_decode_share_tokens.png"):
        assert (out / name).is_file(), name
    assert sum(line.startswith("CPU run:") for line in output.splitlines()) == 1
    cells = pd.read_csv(out / "cells.csv")
    assert len(cells) == 4 and cells["winner"].isna().all() and cells["tie"].isna().all()
    assert {"reference unified ms", "reference split ms", "reference unified passed"} <= set(cells.columns)
    assert "has a winner" in json.loads((out / "env.json").read_text())["atlas"]["results"]["stop"]
    assert "CPU: pipeline demo" in (out / "summary.md").read_text()


def test_resume_measures_only_the_cells_missing(atlas_dir, tmp_path):
    out, _ = atlas_dir
    copy = tmp_path / "run"
    copy.mkdir()
    for f in out.iterdir():
        copy.joinpath(f.name).write_bytes(f.read_bytes())
    rows = pd.read_csv(copy / "results.csv", dtype=str, keep_default_na=False)
    dropped = rows["cell_tokens"] == "16"
    rows[~dropped].to_csv(copy / "results.csv", index=False)
    result = invoke(*SMALL, "--resume", copy)
    assert result.exit_code == 0, result.output
    assert "2 cell(s) already measured" in result.output and "round 1: 2 cell(s)" in result.output
    again = pd.read_csv(copy / "results.csv", dtype=str, keep_default_na=False)
    assert len(again) == len(rows)
    assert not again.duplicated(subset=[*CELL_COLUMNS, "backend", "strategy", "mode"]).any()
    kept = again[again["cell_tokens"] == "4"]
    assert kept.equals(rows[rows["cell_tokens"] == "4"].reset_index(drop=True)) or \
        set(kept["median_ms"]) == set(rows[rows["cell_tokens"] == "4"]["median_ms"])
    finished = invoke(*SMALL, "--resume", copy)
    assert finished.exit_code == 0 and "round" not in finished.output.replace("rounds", "")


def test_the_rule_fitted_on_the_atlas_and_its_rule_py_agree_on_every_cell(atlas_dir, tmp_path):
    pytest.importorskip("sklearn", reason="rule fit needs scikit-learn (the `rule` extra)")
    out, _ = atlas_dir
    result = invoke("rule", "fit", out, "--out", tmp_path / "rule", "--folds", "2")
    assert result.exit_code == 0, result.output
    assert "atlas cells: rule" in result.output
    rule = json.loads((tmp_path / "rule" / "rule.json").read_text())
    assert rule["runs"][0]["kind"] == "atlas"
    spec = importlib.util.spec_from_file_location("exported_rule", tmp_path / "rule" / "rule.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cells = pd.read_csv(out / "cells.csv")
    for line in cells.to_dict("records"):
        batch = cell_batch(tuple(line[n] for n in NAMES))
        decode = batch.num_decode_seqs
        kv_heads = 8 // int(line["gqa_group"])
        features = feature_values(decode, batch.num_tokens, batch.num_seqs, sum(batch.kv_lens), max(batch.kv_lens),
                                  8, kv_heads, int(line["head_dim"]), sum(batch.kv_lens[:decode]),
                                  max(batch.query_lens[decode:], default=0),
                                  decode_query=1 if decode else 0)  # an atlas cell's decode rows: one token, no drafts
        exported = module.choose(list(batch.kv_lens[:decode]), list(batch.query_lens[decode:]),
                                 list(batch.kv_lens[decode:]), 8, kv_heads, int(line["head_dim"]))
        assert " ".join(exported) == walk(rule["tree"], features)["choice"]


def gpu_like(rows: pd.DataFrame, noise: float) -> pd.DataFrame:
    """The CPU rows as an H200's vllm-fa3 rows: unified costs 1 + tokens / CROSS ms, split 2 ms;
    samples spread by `noise` (a wide spread makes the cells near the crossover ties)."""
    rows = rows.copy()
    tokens = rows["cell_tokens"].astype(float)
    median = (1 + tokens / CROSS).where(rows["strategy"] == "unified", 2.0)
    rows["median_ms"] = median
    rows["samples_ms"] = [" ".join(f"{m * (1 + noise * (i - 3) / 3):.6f}" for i in range(7)) for m in median]
    rows["backend"], rows["device"], rows["gpu"] = "vllm-fa3", "cuda:0", "NVIDIA H200"
    return rows


@pytest.mark.parametrize("noise, tie", [(0.01, False), (0.6, True)])
def test_winners_margins_ties_and_crossovers_on_synthetic_gpu_rows(atlas_dir, tmp_path, noise, tie):
    out, _ = atlas_dir
    rows = gpu_like(pd.read_csv(out / "results.csv", dtype=str), noise)
    cells = cell_table(rows, 8, cpu=False)
    small, large = cells[cells["tokens"] == 4].iloc[0], cells[cells["tokens"] == 16].iloc[0]
    assert small["winner"] == "vllm-fa3 unified" and large["winner"] == "vllm-fa3 split"
    assert small["margin"] == pytest.approx(2.0 / 1.4) and large["margin"] == pytest.approx(2.6 / 2.0)
    assert bool(small["tie"]) is tie and small["interval"] == "bootstrap"
    ranges = [parse_range(a, t) for a, t in zip(AXES, ("0:1:2", "16", "8", "0", "4", "32", "4:16:2"))]
    crossovers = crossover_table(ranges, outcomes(cells), 8)
    assert set(crossovers["axis"]) == {"tokens"} and len(crossovers) == 2
    assert set(crossovers["status"]) == {"tie" if tie else "open"}
    assert (crossovers["winner_low"] == "vllm-fa3 unified").all()
    pictures = plot_atlas(cells, crossovers, ranges, rows, tmp_path)
    assert all(p.stat().st_size > 0 for p in pictures)
    text = summary_text(cells, crossovers, ranges, rows, "stopped", cpu=False)
    assert "## Crossovers" in text and "vllm-fa3 unified" in text and "NVIDIA H200" in text


def test_a_cell_whose_point_failed_as_a_whole_stays_a_cell_without_a_winner(atlas_dir):
    out, _ = atlas_dir
    rows = gpu_like(pd.read_csv(out / "results.csv", dtype=str), 0.01)
    failed = (rows["cell_tokens"] == "16") & (rows["cell_decode_share"] == "0.0")
    rows.loc[failed, ["strategy", "verdict", "median_ms"]] = ["", "error", None]
    cells = cell_table(rows.drop_duplicates(subset=[*CELL_COLUMNS, "strategy"]), 8, cpu=False)
    assert len(cells) == 4
    lost = cells[(cells["tokens"] == 16) & (cells["decode_share"] == 0.0)].iloc[0]
    assert pd.isna(lost["winner"]) and not lost["vllm-fa3 unified passed"]
    assert outcomes(cells)[tuple(lost[n] for n in NAMES)].winner is None


def test_rounds_refine_and_a_resume_with_a_larger_budget_measures_nothing_twice(tmp_path, monkeypatch):
    """The job's loop with winners a stand-in names from the coordinates (the CPU's own cells name
    none): refinement rounds run as sweeps, and a resume continues them without repeating a cell."""
    import attnbench.runs.atlas as job

    real, real_table, judged = job._read_outcomes, job.cell_table, []

    def named(run, shape, cpu, round_number=None):
        return {c: CellOutcome("A" if c[NAMES.index("tokens")] < CROSS else "B")
                for c in real(run, shape, cpu, round_number)}

    def counted(rows, heads, cpu):
        judged.append(len(table := real_table(rows, heads, cpu)))
        return table
    monkeypatch.setattr(job, "_read_outcomes", named)
    monkeypatch.setattr(job, "cell_table", counted)
    argv = [*SMALL[:2], "0.5", *SMALL[3:]]  # one decode share: the tokens axis alone varies
    out = tmp_path / "run"
    first = invoke(*argv, "--max-cells", "3", "--out", out)
    assert first.exit_code == 0, first.output
    assert "cell budget (3 cells) ended" in first.output
    def cells() -> int:
        return len(pd.read_csv(out / "results.csv").drop_duplicates(subset=CELL_COLUMNS))
    judged_first = sum(judged)
    assert judged_first == cells()  # each round judges its own cells, none again
    second = invoke(*argv, "--max-cells", "20", "--resume", out)
    assert second.exit_code == 0, second.output
    assert sum(judged) - judged_first == cells()  # the resume judges the earlier cells once, then only new ones
    rows = pd.read_csv(out / "results.csv")
    assert not rows.duplicated(subset=[*CELL_COLUMNS, "backend", "strategy"]).any()
    tokens = sorted(rows["cell_tokens"].unique())
    assert tokens[0] == 4 and tokens[-1] == 16 and len(tokens) > 3
    below, above = max(t for t in tokens if t < CROSS), min(t for t in tokens if t >= CROSS)
    assert above - below <= 0.1 * (above + below) / 2 or above - below == 1
    assert sorted(rows["round"].unique()) == list(range(rows["round"].max() + 1))
    assert "every crossover is located" in second.output  # (the tables, made from the CPU's cells, name no winner)


def test_a_line_holding_several_crossovers_gets_one_margin_panel():
    from attnbench.results.atlas_plots import _lines

    base = {n: 1.0 for n in NAMES}
    edges = pd.DataFrame([{**base, "axis": "tokens", "low": lo, "high": hi, "status": status}
                          for lo, hi, status in ((1, 2, "open"), (4, 8, "located"), (16, 32, "open"))]
                         + [{**base, "decode_share": 0.5, "axis": "tokens", "low": 1, "high": 2, "status": "open"}])
    lines = _lines(pd.DataFrame([base]), edges, ["tokens", "decode_share"])
    assert len(lines) == 2
    assert [fixed["decode_share"] for _, fixed in lines] == [1.0, 0.5]


def test_a_map_promises_numbers_in_its_cells_only_when_it_writes_them(atlas_dir, tmp_path, monkeypatch):
    """A map whose cells are too small to hold a readable number (the text size comes from the
    cell's size) draws no times in them, so its footnote does not say it does."""
    from attnbench.results import atlas_plots

    out, _ = atlas_dir
    rows = gpu_like(pd.read_csv(out / "results.csv", dtype=str), 0.01)
    cells = cell_table(rows, 8, cpu=False)
    drawn = {}
    monkeypatch.setattr(atlas_plots, "finish", lambda fig, axes, heading, path, **_: drawn.setdefault(path, (fig, heading)))
    for side in (40.0, 12.0):  # points: 9.5-point numbers; none (2.9 points would be unreadable)
        monkeypatch.setattr(atlas_plots, "_cell_points", lambda ax, nx, ny, side=side: side)
        atlas_plots.map_figure(cells, "tokens", "decode_share", [], rows, tmp_path / f"map{side:g}.png")
    big, small = drawn[tmp_path / "map40.png"], drawn[tmp_path / "map12.png"]
    assert "number: the best time" in " ".join(big[1].detail) and big[0].axes[0].texts
    assert "number:" not in " ".join(small[1].detail) and not small[0].axes[0].texts


def headline_of(output: str) -> list[str]:
    """The console's closing headline: the lines between `stopped:` and `results:`."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("stopped:"))
    end = next(i for i, line in enumerate(lines) if line.startswith("results:"))
    return lines[start + 1:end]


def test_a_cpu_atlas_ends_with_each_choice_s_times_and_no_verdict(atlas_dir):
    out, output = atlas_dir
    headline = headline_of(output)
    cells = pd.read_csv(out / "cells.csv")
    assert headline[0].startswith(f"{len(cells)} cells (CPU: pipeline demo")
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in headline[1:]
            if line.startswith("| ") and "---" not in line}
    for choice in ("reference unified", "reference split"):
        ms = cells[f"{choice} ms"]
        assert rows[choice] == [f"4 of 4", f"{ms.min():.4g} – {ms.max():.4g}"]
    assert not any(word in " ".join(headline).lower() for word in ("winner", "faster", "slower", "wins"))


def test_a_gpu_atlas_headline_names_the_winners_and_where_they_change(atlas_dir):
    from attnbench.results.atlas_report import headline

    out, _ = atlas_dir
    rows = gpu_like(pd.read_csv(out / "results.csv", dtype=str), 0.01)
    cells = cell_table(rows, 8, cpu=False)
    ranges = [parse_range(a, t) for a, t in zip(AXES, ("0:1:2", "16", "8", "0", "4", "32", "4:16:2"))]
    lines = headline(cells, crossover_table(ranges, outcomes(cells), 8), ranges, cpu=False)
    assert lines[0] == "4 cells" and "CPU" not in " ".join(lines)
    assert any(line.startswith("| vllm-fa3 unified | 2 | 0 |") for line in lines)
    assert any(line.startswith("| vllm-fa3 split | 2 | 0 |") for line in lines)
    assert any(line.startswith("crossovers: 2 edge(s) where the winner changes (2 open)") for line in lines)
    assert sum(line.startswith("| tokens | 4 – 16 |") for line in lines) == 2
