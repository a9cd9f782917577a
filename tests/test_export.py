"""`attnbench export`: every format parsed back and checked field by field against the results."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from attnbench.results import files as report
from attnbench.results import tables as layout
from attnbench.results.export import benchmark_name, by_setting, gab_entries

pytest_plugins = ["results_fixtures"]


def timed(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["verdict"].isin(["pass", "fail"])]


def test_gab_json_is_custom_smaller_is_better_field_by_field(results_dir, tmp_path, cli):
    out = tmp_path / "bench.json"
    assert cli("export", results_dir, "--format", "gab", "--out", out).exit_code == 0
    entries = json.loads(out.read_text())
    rows = timed(report.load_results(results_dir))
    assert isinstance(entries, list) and len(entries) == len(rows) > 0
    assert len({e["name"] for e in entries}) == len(entries), "github-action-benchmark keys series by name"
    for entry, (_, r) in zip(entries, rows.iterrows()):
        assert set(entry) == {"name", "unit", "value", "range", "extra"}
        assert entry["unit"] == "ms"
        assert entry["value"] == r["median_ms"]
        assert entry["name"].startswith(f"{r['kind']} N={r['num_tokens']} h{r['num_heads']} kv{r['num_kv_heads']} "
                                        f"d{r['head_dim']} ")
        assert entry["name"].endswith(f"| {r['backend']} {r['strategy']} {r['mode']} {r['l2']}-L2")
        sign, half = entry["range"].split()
        assert sign == "±" and float(half) == pytest.approx((r["p90_ms"] - r["p10_ms"]) / 2, rel=1e-3)
        extra = dict(line.split(": ", 1) for line in entry["extra"].splitlines())
        assert float(extra["p10 ms"]) == pytest.approx(r["p10_ms"], rel=1e-3)
        assert float(extra["p90 ms"]) == pytest.approx(r["p90_ms"], rel=1e-3)
        assert int(extra["samples"]) == r["samples"]
        assert (extra["check"], extra["gpu"]) == (r["verdict"], r["gpu"])
        assert extra["library"] == f"{r['library']} {r['library_version']}"


def test_gab_names_hold_what_shapes_the_batch_only(cpu_run):
    """A decode row keeps its name when a later run also sweeps prefix ratios, which decode ignores."""
    row = timed(report.load_results(cpu_run)).query("kind == 'decode'").iloc[0]
    assert "ctx=32" in benchmark_name(row) and "prefix=" not in benchmark_name(row)
    assert benchmark_name(row.copy().replace({row["prefix_ratio"]: 0.9})) == benchmark_name(row)
    prefix = timed(report.load_results(cpu_run)).query("kind == 'prefix'").iloc[0]
    assert f"prefix={prefix['prefix_ratio']}" in benchmark_name(prefix) and "ctx=" not in benchmark_name(prefix)


def test_gab_names_stay_unique_when_an_ignored_column_varies(cpu_run):
    df = timed(report.load_results(cpu_run)).query("kind == 'decode'")
    twice = pd.concat([df, df.assign(prefix_ratio=0.9)], ignore_index=True)
    names = [e["name"] for e in gab_entries(twice)]
    assert len(set(names)) == len(names) == 2 * len(df)


def parse_markdown_tables(text: str) -> list[pd.DataFrame]:
    tables, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            header = [c.strip() for c in line.strip("|").split("|")]
            body = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                body.append([c.strip() for c in row.strip("|").split("|")])
            tables.append(pd.DataFrame(body, columns=header))
    return tables


def test_markdown_is_the_seed_table_cell_by_cell(results_dir, cli):
    result = cli("export", results_dir, "--format", "md")
    assert result.exit_code == 0
    df = report.load_results(results_dir)
    expected = [layout.seed_table(rows) for _, rows in by_setting(df)]
    parsed = parse_markdown_tables(result.stdout)
    assert len(parsed) == len(expected)
    for got, want in zip(parsed, expected):
        assert list(got.columns) == list(want.columns)
        assert len(got) == len(want)
        for (_, g), (_, w) in zip(got.iterrows(), want.iterrows()):
            for col in want.columns:
                if col in ("unified ms", "split ms"):
                    assert g[col] == layout.format_ms(w[col])
                elif col == "split / unified":
                    assert g[col] == ("" if pd.isna(w[col]) else f"{w[col]:.3f}")
                else:
                    assert g[col] == str(w[col])


def test_markdown_gives_each_swept_setting_its_own_table(cpu_run, cli, tmp_path):
    df = report.load_results(cpu_run)
    two = pd.concat([df, df.assign(context=64)], ignore_index=True)
    (tmp_path / "results.csv").write_text(two.reindex(columns=report.COLUMNS).to_csv(index=False))
    text = cli("export", tmp_path, "--format", "md").stdout
    assert "#### ctx=32" in text and "#### ctx=64" in text
    tables = parse_markdown_tables(text)
    # kinds whose batch ignores the context still differ by it in the key: they are split too
    assert sum(len(t) for t in tables) == sum(len(layout.seed_table(rows)) for _, rows in by_setting(two))
    assert sum(len(t) for t in tables) == 2 * len(layout.seed_table(df))


def test_csv_reads_back_as_the_same_results(results_dir, cli):
    result = cli("export", results_dir, "--format", "csv")
    assert result.exit_code == 0
    back = pd.read_csv(io.StringIO(result.stdout), dtype={"reason": str, "samples_ms": str, "peak_source": str})
    original = report.load_results(results_dir)
    # columns added since the example was measured come back too: the default its rows meant, or blank
    # (samples_ms: an example kept small without its per-sample timings, e.g. h200-replay-chat-high)
    added = {"decode_seqs": 0, "samples_ms": None}
    assert list(back.columns) == [c for c in report.COLUMNS if c in original.columns or c in added]
    for column in set(added) - set(original.columns):
        assert (back[column] == added[column]).all() if added[column] is not None else back[column].isna().all()
    kept = [c for c in back.columns if c in original.columns]
    pd.testing.assert_frame_equal(back[kept], original[kept], check_dtype=False)


def test_unknown_format_is_refused(cpu_run, cli):
    result = cli("export", cpu_run, "--format", "xml")
    assert result.exit_code == 1
    assert "--format: unknown format 'xml'" in result.output
