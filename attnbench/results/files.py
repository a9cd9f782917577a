"""Rows -> files: results.csv (written row by row), results.parquet, env.json, summary.md, plots.

The DataFrame is the only hand-off between measuring and reporting: everything here reads rows,
so `attnbench plot` / `compare` can rebuild any output from a saved results.csv.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import fields
from pathlib import Path

import pandas as pd

from attnbench.e2e.rows import E2EPoint
from attnbench.errors import AttnbenchError
from attnbench.kernels import rows
from attnbench.kernels.workload import KEY, OLDER_FILES, SweepPoint
from attnbench.results.notes import summary_notes
from attnbench.results.atomic import replace_atomic, write_text_atomic
from attnbench.results.schema import cell_problem, column_types
from attnbench.results.tables import markdown_table, md_lines, ratio_clause, seed_table

# every column list is read off the row dataclasses (kernels/rows.py): a new field is a new column
COLUMNS = rows.names(*rows.ROW_PARTS)
SWEEP_POINT_COLUMNS = rows.names(SweepPoint)  # what identifies a point (resume matches on it)
# a mixed batch's prefill part and decode part, each timed alone (split's two launches; kernels/parts.py)
PART_COLUMNS = tuple(c for c in rows.names(rows.Measurement) if c.endswith("_part_ms"))
# what identifies a measurement across runs (compare matches rows on it)
KEY_COLUMNS = SWEEP_POINT_COLUMNS + [f.name for f in fields(rows.RunColumns) if f.metadata.get(KEY)]


def with_details(row: dict, columns: list[str] = COLUMNS) -> dict:
    """The row with what the library chose (Plan.details: keys that are not columns, e.g.
    FlashInfer's `fi_prefill_backend`) folded into one `details` cell, `key=value` space-separated."""
    extra = {k: v for k, v in row.items() if k not in columns and not k.startswith("_") and v is not None}
    if not extra or row.get("details"):
        return row
    return {**row, "details": " ".join(f"{k}={cell(v)}" for k, v in sorted(extra.items()))}


class RowWriter:
    """Appends rows to results.csv, flushing after each call, never following a symlink.

    A new run creates the file (it must not exist: the run directory was claimed empty). A
    resumed run rewrites it atomically with the rows it keeps, then appends after them.
    """

    def __init__(self, out_dir: Path, keep: list[dict] | None = None, columns: list[str] = COLUMNS):
        self.path = out_dir / "results.csv"
        self.columns = columns
        self.rows: list[dict] = []
        if keep is not None:
            replace_atomic(self.path, lambda tmp: self._write_all(tmp, keep, columns))
        flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
        if keep is None:
            flags |= os.O_CREAT | os.O_EXCL
        self._file = os.fdopen(os.open(self.path, flags, 0o666), "w", newline="")  # the umask decides
        self._csv = csv.DictWriter(self._file, fieldnames=columns, extrasaction="ignore")
        if keep is None:
            self._csv.writeheader()
            self._file.flush()

    @staticmethod
    def _write_all(path: Path, rows: list[dict], columns: list[str]) -> None:
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows({k: cell(row.get(k)) for k in columns} for row in rows)

    def write(self, row: dict) -> None:
        self.write_many([row])

    def write_many(self, rows: list[dict]) -> None:
        rows = [with_details(row, self.columns) for row in rows]
        self.rows += rows
        self._csv.writerows({k: cell(row.get(k)) for k in self.columns} for row in rows)
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def cell(value):
    """A value as results.csv writes it."""
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return "" if value is None else value


# text columns pandas must not guess a type for: an all-blank column is not a float, "1 2" is not a
# number, and a library version "2.10" is not the number 2.1
TEXT_COLUMNS = {f.name: str for part in (rows.RunColumns, rows.Measurement, rows.Clocks, rows.Decisions, rows.RawCells)
                for f in fields(part) if f.type == "str | None"}


def load_results(path: str | Path) -> pd.DataFrame:
    """A results directory, results.csv or results.parquet -> DataFrame; AttnbenchError naming the
    file when it cannot be read as one.

    A directory means its results.csv: every run writes that file row by row, while results.parquet
    is an extra (written only where pyarrow is installed) and may be older than the CSV. A .parquet
    path is read only with pyarrow: without it the error says so rather than read another file.
    """
    return with_added_keys(_load(results_file(path)))


# kernel key columns added since the first results files, and the value older rows meant by leaving
# them out (or blank: rows an older run left that a later --resume kept)
ADDED_KEYS = {f.name: f.metadata[OLDER_FILES] for f in fields(SweepPoint) if OLDER_FILES in f.metadata}


def with_added_keys(df: pd.DataFrame) -> pd.DataFrame:
    """A kernel results table with every key column; e2e results (no `kind`) and tables without the
    point's columns (no `seed`: not a whole results file) as they are."""
    if "kind" not in df.columns or "seed" not in df.columns:
        return df
    for column, value in ADDED_KEYS.items():
        if column not in df.columns:  # beside the point column before it, as a new file has it
            before = SWEEP_POINT_COLUMNS[SWEEP_POINT_COLUMNS.index(column) - 1]
            df.insert(df.columns.get_loc(before) + 1 if before in df.columns else len(df.columns), column, value)
        else:
            df[column] = df[column].where(df[column].notna(), value)
    return df


def _load(path: Path) -> pd.DataFrame:
    if path.name == "results.csv" and os.path.isdir(path.parent) and not os.path.lexists(path):
        parquet = os.path.exists(path.with_name("results.parquet"))
        raise AttnbenchError(f"{path.parent} holds no results.csv"
                             + (" (only results.parquet: give that file to read it)" if parquet else ""))
    if not os.path.isfile(path):
        raise AttnbenchError(_not_a_file(path))
    if path.suffix == ".parquet":
        return _read_parquet(path)
    text = _csv_text(path)
    try:
        return pd.read_csv(io.StringIO(text), dtype=TEXT_COLUMNS)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise AttnbenchError(f"{path} is not a readable CSV file ({str(exc).strip().splitlines()[0]})") from None


def results_file(path: str | Path) -> Path:
    """The file a results path means: a run directory's results.csv, or the file itself."""
    path = Path(path)
    return path / "results.csv" if os.path.isdir(path) and path.suffix not in (".csv", ".parquet") else path


def _not_a_file(path: Path) -> str:
    # os.path, not Path: its checks answer False for a name too long or holding a NUL, never raise
    if os.path.isdir(path):
        return f"{path} is a directory where a results file was expected"
    if os.path.exists(path):
        return f"{path} is not a regular file"
    blocking = next((p for p in path.parents if os.path.exists(p)), None)
    if blocking is not None and not os.path.isdir(blocking):
        return f"{path} does not exist: {blocking} is a file, not a directory"
    return f"{path} does not exist"


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        import pyarrow
    except ImportError:
        csv_path = path.with_name("results.csv")
        instead = f"; {csv_path} beside it holds the rows" if os.path.isfile(csv_path) else ""
        raise AttnbenchError(f"{path}: reading parquet needs pyarrow (pip install pyarrow){instead}") from None
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError, pyarrow.ArrowException) as exc:
        raise AttnbenchError(f"{path} is not a readable parquet file ({str(exc).strip().splitlines()[0]})") from None


def _csv_text(path: Path) -> str:
    """The file's text, once it is known to be a whole CSV table: UTF-8, one field count, a line end last."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise AttnbenchError(f"cannot read {path}: {exc.strerror or exc}") from None
    if b"\0" in data:
        raise AttnbenchError(f"{path} is not a CSV file: it holds NUL bytes (binary data, or a write that was cut)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise AttnbenchError(f"{path} is not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); "
                             "results files are UTF-8 CSV") from None
    if not text.strip():
        raise AttnbenchError(f"{path} is empty")
    if text.lstrip()[:1] in ("{", "["):
        raise AttnbenchError(f"{path} looks like JSON, not a results CSV")
    # a long sampling budget makes samples_ms cells longer than the csv module's default limit
    csv.field_size_limit(max(csv.field_size_limit(), len(text)))
    try:
        header, *rows = csv.reader(io.StringIO(text), strict=True)  # strict: a quote left open is an error
    except csv.Error as exc:
        opened = ": a quoted field is never closed" if "end of data" in str(exc) else ""
        raise AttnbenchError(f"{path} is not a readable CSV file ({exc}{opened})") from None
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise AttnbenchError(f"{path}: column {repeated[0]} appears more than once in the header")
    for number, row in enumerate((r for r in rows if r), 1):
        if len(row) != len(header):
            raise AttnbenchError(f"{path} row {number} has {len(row)} field(s), the header {len(header)}: "
                                 "a cut or mangled line")
    if rows and not text.endswith(("\n", "\r")):
        raise AttnbenchError(f"{path} ends mid-row (no line end after the last row): the file was cut short")
    return text


def read_table(path: Path, types: dict[str, type], required: tuple[str, ...] = ()) -> tuple[list[str], list[dict]]:
    """A CSV file a run measured beside results.csv (agreement.csv, telemetry.csv): its header and
    rows as text, once it is a whole CSV table with the `required` columns and every cell of a
    column in `types` is empty or of that type; else AttnbenchError naming the file, row and column."""
    reader = csv.DictReader(io.StringIO(_csv_text(path)), strict=True)
    header, table = list(reader.fieldnames or []), list(reader)
    missing = [c for c in required if c not in header]
    if missing:
        raise AttnbenchError(f"{path} lacks column(s) {', '.join(missing)}")
    for number, row in enumerate(table, 1):
        for column in (c for c in header if c in types):
            problem = "is empty" if column in required and not row[column].strip() else \
                cell_problem(row[column], types[column])
            if problem:
                raise AttnbenchError(f"{path} row {number}: {column} {problem}")
    return header, table


def agreement_types() -> dict[str, type]:
    """agreement.csv's columns: the point, the two runs compared and what their tokens agreed on."""
    from attnbench.e2e.agreement import Agreement  # torch: imported where an e2e run is read

    return column_types(E2EPoint, Agreement, backend=str, reference=str, run=str)


def read_agreement_table(path: Path) -> tuple[list[str], list[dict]]:
    """An e2e run's agreement.csv: header and rows, as text."""
    return read_table(path, agreement_types(), required=(*rows.names(E2EPoint), "backend", "verdict"))


def read_agreements(path: Path) -> list[dict]:
    """An e2e run's agreement.csv rows, as text (none when there is no such file)."""
    return read_agreement_table(path)[1] if os.path.lexists(path) else []


def write_env(out_dir: Path, env: dict) -> None:
    write_text_atomic(out_dir / "env.json", json.dumps(env, indent=2, default=str) + "\n")


def write_parquet(df: pd.DataFrame, out_dir: Path) -> Path | None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return None
    path = out_dir / "results.parquet"
    replace_atomic(path, lambda tmp: df.to_parquet(tmp, index=False))
    return path


def write_summary(df: pd.DataFrame, out_dir: Path, env: dict) -> Path:
    gpu = (env.get("gpu") or {}).get("name", "CPU (reference backend only)")
    lines = [
        "# attnbench kernel summary\n",
        f"- command: `{env.get('command', '')}`",
        f"- device: {gpu}; torch {env.get('torch')}; attnbench {env.get('attnbench_version')}",
        "- times: median of replicate medians, each over samples (CUDA events; perf_counter on CPU)"
        + ratio_clause(df["strategy"].dropna().unique()),
        "",
        markdown_table(seed_table(df)),
        *summary_notes(df),
    ]
    problems = df[~df["verdict"].isin(["pass"])]
    if not problems.empty:
        columns = ["kind", "num_tokens", "num_heads", "head_dim", "backend", "strategy", "mode", "verdict", "reason"]
        lines += ["## Rows that did not pass\n",
                  *md_lines(["kind", "tokens", "heads", "dim", *columns[4:]],
                            problems[columns].itertuples(index=False)), ""]
    rules = df["lengths_rule"].dropna().drop_duplicates()
    if not rules.empty:
        lines += ["## How lengths were drawn\n", *[f"- {rule}" for rule in rules], ""]
    path = out_dir / "summary.md"
    write_text_atomic(path, "\n".join(lines))
    return path
