"""What the tests of bad results files share: the one-error-line check, a results.csv as text
(header and rows) and the mutations that break it, and a count of the distinct invalid inputs
each test module tries (`-s` prints it).

Used by tests/test_results_input*.py and tests/test_bad_input_readers.py (`refused`: one error line
and every file under the given directories unchanged); the run directories they break come from
results_fixtures.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from bad_input_cli import assert_one_error_line, invoke
from hypothesis import settings

NA_TEXT = {"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A",
           "NA", "NULL", "NaN", "None", "n/a", "nan", "null"}  # pandas reads these as an empty cell
SETTINGS = settings(max_examples=80, deadline=None, database=None, derandomize=True)


def counted(tried: set, module: str):
    """A module's autouse fixture that prints how many distinct invalid inputs it tried."""
    @pytest.fixture(scope="module", autouse=True)
    def count_what_was_tried():
        yield
        print(f"\n{module}: {len(tried)} distinct invalid inputs tried")
    return count_what_was_tried


def assert_one_error(result, *needles: str) -> None:
    """Exit 1, no traceback, and the last line of output is `error: ...` holding every needle."""
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 1, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("error: ") and all(n in last for n in needles), (needles, result.output)


def read_table(run_dir: Path) -> tuple[list[str], list[list[str]]]:
    with open(run_dir / "results.csv", newline="", encoding="utf-8") as f:
        header, *rows = list(csv.reader(f))
    return header, rows


def csv_bytes(header: list[str], rows: list[list[str]]) -> bytes:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([header, *rows])
    return buf.getvalue().encode()


def set_cell(column: str, value: str, row: int = 0):
    def mutate(header, rows):
        rows = [list(r) for r in rows]
        rows[row][header.index(column)] = value
        return csv_bytes(header, rows)
    return mutate


def drop(*columns: str):
    def mutate(header, rows):
        keep = [i for i, name in enumerate(header) if name not in columns]
        return csv_bytes([header[i] for i in keep], [[r[i] for i in keep] for r in rows])
    return mutate


def cut(at: float):
    """The file cut inside its last row, at a fraction of that row."""
    def mutate(header, rows):
        whole = csv_bytes(header, rows)
        start = whole.rstrip(b"\n").rfind(b"\n") + 1
        return whole[:start + max(1, int((len(whole) - 1 - start) * at))]
    return mutate


def raw(data: bytes):
    return lambda header, rows: data


def write_bad(tmp_path: Path, data: bytes) -> Path:
    (tmp_path / "bad").mkdir(exist_ok=True)
    (tmp_path / "bad" / "results.csv").write_bytes(data)
    return tmp_path / "bad" / "results.csv"


def snapshot(*roots: Path) -> dict[str, bytes]:
    """Every file under the roots, by path: what a refused command must leave as it was."""
    return {str(p): p.read_bytes() for root in roots for p in sorted(root.rglob("*")) if p.is_file()}


def refused(args: list, named: list[str], *keep: Path) -> None:
    """One error line holding every word of `named`, and every file under `keep` as it was."""
    before = snapshot(*keep)
    line = assert_one_error_line(invoke(*args))
    assert all(word in line for word in named) and snapshot(*keep) == before, (named, line)


def every_tool(cli, good: Path, bad: Path, tmp_path: Path):
    return [cli("compare", good, bad), cli("compare", bad, good), cli("export", bad, "--format", "md"),
            cli("plot", bad, "--out", tmp_path / "plots")]
