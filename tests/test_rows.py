"""Typed rows: every results column is a dataclass field, and a row written from the dataclasses
reads back (files.load_results, results.read.load_run) with the same values."""

from __future__ import annotations

import math
import string
import tempfile
from dataclasses import fields
from pathlib import Path

import numpy as np
import pandas as pd
from bad_results import NA_TEXT
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbench.results import e2e_report as report
from attnbench.e2e.rows import E2E_ROW_PARTS, E2EHead, E2EMeasures, E2EPoint, E2ERun
from attnbench.kernels import rows
from attnbench.kernels.sweep import SweepPlan, point_row
from attnbench.kernels.timing import TimingConfig
from attnbench.kernels.workload import DTYPES, KINDS, SweepPoint, build_batch
from attnbench.results import files, read, tables, telemetry

SETTINGS = settings(max_examples=40, deadline=None, database=None, derandomize=True)
TEXT = st.text(string.ascii_letters + string.digits + " ,;:=_.'\"+-/", min_size=1, max_size=30).filter(
    lambda t: t.strip() == t and t not in NA_TEXT)
FLOAT = st.floats(allow_nan=False, allow_infinity=False, width=64)
POSITIVE = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False)


def names(*parts) -> list[str]:
    return [f.name for part in parts for f in fields(part)]


def test_the_columns_are_the_fields_in_order():
    assert files.SWEEP_POINT_COLUMNS == names(SweepPoint) == list(SweepPoint("decode", 8, 4, 64).key())
    assert files.COLUMNS == names(SweepPoint, rows.BatchColumns, rows.RunColumns, rows.Measurement, rows.Clocks,
                                  rows.Decisions, rows.RawCells)
    assert files.KEY_COLUMNS == [*names(SweepPoint), "backend", "strategy", "mode", "l2"]
    assert set(files.ADDED_KEYS) <= set(files.SWEEP_POINT_COLUMNS) and set(files.PART_COLUMNS) <= set(files.COLUMNS)
    assert set(read.KERNEL.key_numbers) == set(names(SweepPoint)) - {"kind", "dtype", "causal", "context"}
    assert set(tables.COLUMN_NAMES) <= set(files.SWEEP_POINT_COLUMNS)
    assert report.E2E_POINT == names(E2EPoint) and set(read.E2E.key) <= set(names(*E2E_ROW_PARTS))
    sample = telemetry.Sample(0.0, 1500.0, 2619.0, 61.0, 650.0, 0x4)
    assert list(telemetry.summarize([sample], 1980.0)) == names(rows.Clocks)


def test_a_point_row_fills_only_columns():
    plan = SweepPlan((), ("reference",), ("unified",), ("eager",), TimingConfig(), "cpu")
    row = point_row(plan, SweepPoint("mixed", 64, 4, 64, decode_seqs=3), None, "error", "it broke")
    assert set(row) <= set(files.COLUMNS)
    assert (row["decode_seqs"], row["num_decode_seqs"], row["verdict"], row["gpu"]) == (3, 3, "error", "cpu")


@st.composite
def sweep_points(draw) -> SweepPoint:
    kv_heads, group = draw(st.integers(1, 8)), draw(st.integers(1, 4))
    low = draw(st.integers(1, 2048))
    context = draw(st.sampled_from([str(low), f"uniform:{low}:{low + draw(st.integers(0, 2048))}"]))
    fraction = st.floats(0.0, 0.99)
    return SweepPoint(draw(st.sampled_from(KINDS)), draw(st.integers(1, 2048)), kv_heads * group,
                      8 * draw(st.integers(1, 32)), draw(st.sampled_from(DTYPES)), 16 * draw(st.integers(1, 8)),
                      draw(st.booleans()), context, draw(fraction), draw(fraction), draw(st.integers(1, 16)),
                      draw(st.integers(1, 1024)), draw(st.integers(0, 2**63 - 1)), draw(st.integers(0, 64)),
                      num_kv_heads=kv_heads)


def optional(strategy):
    return st.none() | strategy


@st.composite
def measurements(draw) -> rows.Measurement:
    """Any value of each field's type, or None."""
    kinds = {"float | None": FLOAT, "int | None": st.integers(0, 2**31), "bool | None": st.booleans(), "str | None": TEXT}
    return rows.Measurement(**{f.name: draw(optional(kinds[f.type])) for f in fields(rows.Measurement)})


def same(expected, back) -> bool:
    """A value as written against the value read back (CSV text: None and NaN come back empty)."""
    if expected is None or expected == "" or (isinstance(expected, float) and math.isnan(expected)):
        return pd.isna(back)
    if isinstance(expected, bool):
        return back == expected
    if isinstance(expected, int):
        return isinstance(back, (int, np.integer)) and int(back) == expected
    if isinstance(expected, float):
        return float(back) == expected
    return str(back) == expected


def assert_read_back(written: dict, back: pd.Series) -> None:
    wrong = {c: (v, back[c]) for c, v in written.items() if not same(v, back[c])}
    assert not wrong, wrong


@SETTINGS
@given(point=sweep_points(), measured=measurements(), version=st.sampled_from(["2.10", "0.2.6", None]),
       clocks=st.builds(rows.Clocks, optional(POSITIVE), optional(POSITIVE), optional(POSITIVE), optional(POSITIVE),
                        optional(POSITIVE), optional(TEXT), optional(TEXT)),
       raw=st.builds(rows.RawCells, optional(TEXT), optional(TEXT)))
def test_a_kernel_row_reads_back_as_written(point, measured, version, clocks, raw):
    run = rows.RunColumns("cuda", "NVIDIA H200", "fa2", "flash-attn", version, "split", "graph", "cold")
    written = rows.cells(point, rows.BatchColumns.of(build_batch(point)), run, measured, clocks, raw)
    with tempfile.TemporaryDirectory() as tmp:
        writer = files.RowWriter(Path(tmp))
        writer.write(written)
        writer.close()
        back = files.load_results(tmp)
    assert list(back.columns) == files.COLUMNS
    assert_read_back({c: written.get(c) for c in files.COLUMNS}, back.iloc[0])


@SETTINGS
@given(point=st.builds(E2EPoint, st.integers(1, 4096), st.integers(1, 512), st.integers(1, 256)),
       tp=st.integers(1, 8), strategy=st.sampled_from(["unified", "split"]),
       cudagraph=st.sampled_from(["none", "decode", "piecewise", "full"]), p50=POSITIVE, extra=POSITIVE,
       reason=optional(TEXT))
def test_an_e2e_row_reads_back_as_written(point, tp, strategy, cudagraph, p50, extra, reason):
    run = E2ERun("tiny", 0.001, "bfloat16", 16, 0, "cpu", "cpu", tp, 1, 2)
    head = E2EHead("reference", None, None, strategy, "eager" if cudagraph == "none" else "graph", cudagraph,
                   "safe" if cudagraph == "full" else "", "")
    measured = E2EMeasures(graphs=0, graph_mem_mb=0.0, request_p50_s=p50, request_p90_s=p50 + extra,
                           output_tok_s=extra, finite=True, repeatable=True, verdict="pass", reason=reason,
                           fused_ops="torch", agreement="match")
    written = rows.cells(run, point, head, measured)
    with tempfile.TemporaryDirectory() as tmp:
        pd.DataFrame([written]).to_csv(Path(tmp) / "results.csv", index=False)
        loaded = read.load_run(tmp, "RESULTS")
    assert loaded.kind is read.E2E
    assert_read_back(written, loaded.rows.iloc[0])


def test_an_e2e_file_from_before_tp_and_cudagraph_reads_with_what_it_meant(tmp_path):
    head = E2EHead("reference", None, None, "unified", "graph", "decode")
    written = rows.cells(E2ERun("tiny", 0.001, "bfloat16", 16, 0, "cpu", "cpu", 1, 1, 2), E2EPoint(8, 4, 2), head,
                         E2EMeasures(request_p50_s=0.5, verdict="pass"))
    pd.DataFrame([written]).drop(columns=["tp", "cudagraph"]).to_csv(tmp_path / "results.csv", index=False)
    back = read.load_run(tmp_path, "RESULTS").rows.iloc[0]
    assert (back["tp"], back["cudagraph"]) == (1, "decode")


def test_what_the_runners_write_is_the_row_fields(tmp_path):
    from results_fixtures import CPU_RUN, invoke

    e2e = invoke("e2e", "--model", "tiny", "--device", "cpu", "--warmup", "0", "--iters", "1", "--input-len", "8",
                 "--output-len", "2", "--batch-size", "1", "--out", tmp_path / "e2e")
    kernel = invoke(*CPU_RUN, "--tokens", "8", "--out", tmp_path / "kernel")
    assert e2e.exit_code == 0 and kernel.exit_code == 0, e2e.output + kernel.output
    assert list(pd.read_csv(tmp_path / "e2e" / "results.csv").columns) == names(*E2E_ROW_PARTS)
    assert list(pd.read_csv(tmp_path / "kernel" / "results.csv").columns) == files.COLUMNS
