"""Saved results in, checked: the one door `compare`, `export` and `plot` read through.

files.load_results turns a file into rows. Before the tools divide, plot and publish those rows
they need two more things: what the file is (a kernel sweep, or an `attnbench e2e` run: each has
its own key and its own measure), and that what they will compute with is there and is a number.
A file that fails either ends here in one AttnbenchError naming the file, the row and the column,
never in a traceback or in a plausible table made of garbage.
"""

from __future__ import annotations

import math
from dataclasses import Field, dataclass, fields
from pathlib import Path

import numpy as np
import pandas as pd

from attnbench.e2e.rows import E2E_ADDED_KEYS, E2E_KEY, E2E_ROW_PARTS
from attnbench.e2e.serve_metrics import TraceMetric
from attnbench.errors import AttnbenchError
from attnbench.kernels import rows
from attnbench.kernels.workload import KINDS, SweepPoint
from attnbench.results.files import KEY_COLUMNS, PART_COLUMNS, load_results, results_file
from attnbench.results.schema import column_types

MEASURED = ("pass", "fail")  # the verdicts of rows that were timed


@dataclass(frozen=True)
class ResultKind:
    """What one kind of results file holds, as the tools need to know it."""

    name: str
    key: tuple[str, ...]          # identifies a measurement across runs: compare matches rows on it
    measure: str                  # the timed value compared, exported and plotted
    unit: str
    spread: tuple[str, ...]       # (low, high) percentile columns around the measure; "" where not stored
    key_numbers: tuple[str, ...]  # key columns that are a finite number in every row
    numbers: tuple[str, ...]      # other columns the tools compute with: empty or a finite number (where present)
    optional: tuple[str, ...]     # columns the tools read that an older or trimmed file may lack
    markers: tuple[str, ...]      # columns only this kind of file has
    defaults: tuple[tuple[str, object], ...] = ()  # key columns older files lack, and the value they meant
    types: tuple[tuple[str, type], ...] = ()  # every column's type, off the row dataclasses: int, float or str
    replicates: str = "replicate_medians_ms"  # each replicate's (serve's) value, space-separated: compare's Welch interval

    def describe(self) -> str:
        return DESCRIBED[self.name]


def _is_number(f: Field) -> bool:
    return f.type.split(" |")[0] in ("int", "float")


KERNEL = ResultKind(
    "kernel", tuple(KEY_COLUMNS), "median_ms", "ms", ("p10_ms", "p90_ms"),
    key_numbers=tuple(f.name for f in fields(SweepPoint) if _is_number(f)),
    numbers=("median_ms", "p10_ms", "p90_ms", "samples", "tflops", "gbps", *PART_COLUMNS),
    optional=("p10_ms", "p90_ms", "samples", "samples_ms", "tflops", "gbps", "gpu", "library", "library_version",
              "reason"),
    markers=("kind", "median_ms"),  # files.load_results adds key columns older files lack
    types=tuple(column_types(*rows.ROW_PARTS).items()))
E2E = ResultKind(
    "e2e", E2E_KEY, "request_p50_s", "s", ("", "request_p90_s"),
    key_numbers=tuple(f.name for part in E2E_ROW_PARTS for f in fields(part) if f.name in E2E_KEY and _is_number(f)),
    numbers=("request_p50_s", "request_p90_s", "request_p99_s", "output_tok_s"),
    optional=("request_p90_s", "request_p99_s", "output_tok_s", "agreement", "gpu", "library", "library_version",
              "reason"),
    markers=("input_len", "request_p50_s"),
    defaults=E2E_ADDED_KEYS,  # e2e/rows.py: what files from before --tp and --cudagraph meant
    types=tuple(column_types(*E2E_ROW_PARTS).items()))
TRACE = ResultKind(
    "trace", ("model", "dtype", "block_size", "chunk_size", "max_num_seqs", "arrivals", "trace", "backend", "strategy",
              "mode", "metric"), "serve_median_ms", "ms", ("serve_min_ms", "serve_max_ms"),
    key_numbers=("block_size", "chunk_size", "max_num_seqs"),
    numbers=("serve_median_ms", "serve_min_ms", "serve_max_ms", "serves", "graphs_captured_while_serving"),
    optional=("serve_min_ms", "serve_max_ms", "serves", "serves_ms", "agreement", "gpu", "library", "library_version",
              "reason"),
    markers=("metric", "serves_ms"), types=tuple(column_types(TraceMetric).items()), replicates="serves_ms")
RESULT_KINDS = (KERNEL, E2E, TRACE)
DESCRIBED = {"kernel": "a kernel sweep (attnbench kernel / run)", "e2e": "an e2e run (attnbench e2e)",
             "trace": "a served trace (attnbench e2e --trace)"}


def row_default(kind: ResultKind, column: str, row: dict) -> object:
    """The value a row that lacks a key column meant (a default may depend on the row, as cudagraph on mode)."""
    value = dict(kind.defaults).get(column, "")
    if callable(value):
        value = value(pd.DataFrame([row]))
        return value.iloc[0] if isinstance(value, pd.Series) else value
    return value


@dataclass(frozen=True)
class Run:
    """One results file, read and checked."""

    path: Path    # as given: a directory or a file
    source: Path  # the file the rows came from
    kind: ResultKind
    rows: pd.DataFrame


def load_run(path: str | Path, name: str) -> Run:
    """A results directory or file -> Run; AttnbenchError starting with `name` (BASE, NEW, RESULTS)."""
    path, source = Path(path), results_file(path)
    try:
        df = load_results(path)
        kind = kind_of(df, source)
        return Run(path, source, kind, checked(df, kind, source))
    except AttnbenchError as exc:
        raise AttnbenchError(f"{name}: {exc}") from None


def one_kind(runs: list[Run], tool: str) -> ResultKind:
    """The kind all runs share; a kernel sweep and an e2e run side by side is an error."""
    for run in runs[1:]:
        if run.kind != runs[0].kind:
            raise AttnbenchError(f"{runs[0].source} is {runs[0].kind.describe()} and {run.source} "
                                 f"{run.kind.describe()}: {tool} takes results of one kind")
    return runs[0].kind


def kind_of(df: pd.DataFrame, source: Path) -> ResultKind:
    found = [kind for kind in RESULT_KINDS if any(c in df.columns for c in kind.markers)]
    if len(found) == 1:
        return found[0]
    listed = " nor ".join(f"{kind.describe()} ({', '.join(kind.markers)})" for kind in RESULT_KINDS)
    if not found:
        raise AttnbenchError(f"{source} is not an attnbench results file: it has the columns of neither {listed}")
    raise AttnbenchError(f"{source} has the columns of both {listed.replace(' nor ', ' and ')}")


def checked(df: pd.DataFrame, kind: ResultKind, source: Path) -> pd.DataFrame:
    """The rows, with the kind's number columns as numbers, once every check below has passed."""
    df = df.assign(**{c: v for c, v in kind.defaults if c not in df.columns})
    missing = [c for c in (*kind.key, "verdict", kind.measure) if c not in df.columns]
    if missing:
        raise AttnbenchError(f"{source} lacks column(s) {', '.join(missing)}, which {kind.describe()} "
                             "results always have")
    if df.empty:
        raise AttnbenchError(f"{source} holds no rows (a header only)")
    df = df.reset_index(drop=True).assign(**{c: np.nan for c in kind.optional if c not in df.columns})
    for column in (c for c in (*kind.key_numbers, *kind.numbers) if c in df.columns):
        df[column] = _numbers(df, column, source, required=column in kind.key_numbers)
    _check_types(df, kind, source)
    verdict = df["verdict"]
    blank = verdict.isna() | (verdict.astype(str).str.strip() == "")
    if blank.any():
        raise AttnbenchError(f"{source} row {_row(blank)}: verdict is empty")
    timed = verdict.isin(MEASURED)
    _check_times(df[timed], kind, source)
    if kind is KERNEL:
        unknown = ~df["kind"].isin(KINDS)
        if unknown.any():
            raise AttnbenchError(f"{source} row {_row(unknown)}: kind {df['kind'][unknown].iloc[0]!r} is not a "
                                 f"batch kind ({', '.join(KINDS)})")
        _check_samples(df, source)
    if kind is TRACE:
        _check_times_cells(df, kind.replicates, source)
    _check_unique(df, kind, source)
    return df


def _row(mask: pd.Series) -> int:
    """The first row where mask holds, counted from 1 after the header."""
    return int(np.flatnonzero(mask.to_numpy())[0]) + 1


def _numbers(df: pd.DataFrame, column: str, source: Path, required: bool) -> pd.Series:
    raw = df[column]
    if pd.api.types.is_bool_dtype(raw):
        raise AttnbenchError(f"{source}: column {column} holds True/False, not numbers")
    values = pd.to_numeric(raw, errors="coerce").astype(float)
    text = raw.astype(str).str.strip()
    given = raw.notna() & (text != "")
    not_number = given & values.isna() & (text.str.lower() != "nan")
    if not_number.any():
        raise AttnbenchError(f"{source} row {_row(not_number)}: {column} {raw[not_number].iloc[0]!r} "
                             "is not a number")
    infinite = np.isinf(values)
    if infinite.any():
        raise AttnbenchError(f"{source} row {_row(infinite)}: {column} is {values[infinite].iloc[0]}, not a "
                             "finite number")
    if required and values.isna().any():
        raise AttnbenchError(f"{source} row {_row(values.isna())}: {column} is empty; every row needs it")
    # numbers stay as read (an int column stays int, so labels read N=100, not N=100.0)
    return raw if pd.api.types.is_numeric_dtype(raw) else pd.to_numeric(raw, errors="coerce")


def _check_types(df: pd.DataFrame, kind: ResultKind, source: Path) -> None:
    """Every column the row dataclasses type as a number: empty or a finite number, and whole where an int."""
    for column, type_ in kind.types:
        if type_ not in (int, float) or column not in df.columns:
            continue
        values = pd.to_numeric(_numbers(df, column, source, required=False), errors="coerce")
        fraction = values.notna() & (values % 1 != 0)
        if type_ is int and fraction.any():
            raise AttnbenchError(f"{source} row {_row(fraction)}: {column} {values[fraction].iloc[0]} is not an "
                                 "integer")


def _check_times(timed: pd.DataFrame, kind: ResultKind, source: Path) -> None:
    """A timed row's measure is a positive time, inside its percentile spread where one is stored."""
    times = timed[kind.measure]
    bad = ~(times > 0)
    if bad.any():
        row = timed[bad].iloc[0]
        raise AttnbenchError(f"{source} row {timed.index[bad][0] + 1}: {kind.measure} is {row[kind.measure]} in a "
                             f"row whose verdict is {row['verdict']}; a timed row needs a positive, finite time")
    low, high = kind.spread
    for column, outside in ((low, lambda v: v > times), (high, lambda v: v < times)):
        if not column:
            continue
        wrong = timed[column].notna() & outside(timed[column])
        if wrong.any():
            raise AttnbenchError(f"{source} row {timed.index[wrong][0] + 1}: {column} "
                                 f"{timed[column][wrong].iloc[0]} lies on the wrong side of {kind.measure} "
                                 f"{times[wrong].iloc[0]}")


def _check_samples(df: pd.DataFrame, source: Path) -> None:
    """samples_ms, replicate_medians_ms: empty, or times separated by spaces, each positive and finite."""
    for column in ("samples_ms", "replicate_medians_ms"):  # runs before replicates (issue 9) lack the second
        if column in df:
            _check_times_cells(df, column, source)


def _check_times_cells(df: pd.DataFrame, column: str, source: Path) -> None:
    for number, cell in enumerate(df[column], 1):
        if not isinstance(cell, str) or not cell.strip():
            continue
        try:
            values = [float(x) for x in cell.split()]
        except ValueError:
            values = [math.nan]
        if not all(math.isfinite(v) and v > 0 for v in values):
            raise AttnbenchError(f"{source} row {number}: {column} must be positive times separated by "
                                 f"spaces, got {cell[:40]!r}")


def canonical(value) -> str:
    """One spelling per key value, so 1024 (CSV int) matches '1024' (string column) and True 'True'."""
    text = str(value)
    if text in ("True", "False"):
        return text.lower()
    try:
        return repr(float(text))
    except ValueError:
        return text


def _check_unique(df: pd.DataFrame, kind: ResultKind, source: Path) -> None:
    """One row per configuration: two would make every tool pick one of them, or draw both."""
    keys = pd.Series(["|".join(canonical(v) for v in row) for row in df[list(kind.key)].itertuples(index=False)])
    repeated = keys.duplicated()
    if repeated.any():
        second = _row(repeated)
        first = _row(keys == keys[second - 1])
        raise AttnbenchError(f"{source} rows {first} and {second} measure the same configuration (every key "
                             f"column equal: {', '.join(kind.key)}); a results file holds one row per configuration")
