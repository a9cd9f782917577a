"""Generated bad input for `compare`, `export` and `plot` (hypothesis): cells and bytes of a
results file that make it invalid wherever they land, and values of --threshold / --ignore. Each
must be one `error:` line, exit 1, never a traceback.

Each distinct invalid input tried is recorded in TRIED (`-s` prints the count).
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from bad_results import NA_TEXT, SETTINGS, assert_one_error, counted, csv_bytes, read_table, set_cell, write_bad
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbench.results.files import KEY_COLUMNS

pytest_plugins = ["results_fixtures"]

TRIED: set[tuple[str, str]] = set()
count_what_was_tried = counted(TRIED, __name__)


# ---- generated: cells, bytes, flags --------------------------------------------------------------------

def finite_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


GARBAGE = st.one_of(
    st.sampled_from(["abc", "inf", "-inf", "Infinity", "1e999", "0x1p3", "1,5", "1.2.3", "--1", "🙂", "NaN", "null",
                     "[/bold]", "[red]", "\\", '"', "1e", "e5", "True"]),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), min_size=1, max_size=12),
).filter(lambda v: not finite_number(v))
NOT_EMPTY = GARBAGE.filter(lambda v: v not in NA_TEXT and v.strip() not in NA_TEXT)  # not read as an empty cell


def cell_mutation():
    """(column, value) pairs that make a kernel results file invalid, whichever row they land in."""
    times = st.lists(st.one_of(GARBAGE, st.floats(max_value=0).map(repr), st.floats(0.1, 1).map(repr)), min_size=1,
                     max_size=4).map(" ".join).filter(lambda v: v.strip() not in NA_TEXT and not all(
                         finite_number(x) and float(x) > 0 for x in v.split()))
    return st.one_of(
        st.tuples(st.sampled_from(["num_tokens", "num_heads", "num_kv_heads", "head_dim", "block_size",
                                   "decode_share", "prefix_ratio", "spec_k", "prefill_len", "seed"]), GARBAGE),
        st.tuples(st.just("median_ms"), GARBAGE | st.floats(max_value=0).map(repr)),
        st.tuples(st.sampled_from(["p10_ms", "p90_ms", "samples", "tflops", "gbps"]), NOT_EMPTY),
        st.tuples(st.just("samples_ms"), times),
        st.tuples(st.just("kind"), GARBAGE),
        st.tuples(st.just("verdict"), st.sampled_from(sorted(NA_TEXT)) | st.text(" \t", min_size=1, max_size=3)))


def byte_mutation(whole: bytes):
    """(what, bytes): a cut inside a row, a NUL or invalid UTF-8, a field too many, a row twice."""
    lines = whole.split(b"\n")[:-1]
    some_row = st.integers(1, len(lines) - 1)
    return st.one_of(
        st.integers(len(lines[0]) + 2, len(whole) - 2).filter(lambda i: whole[i - 1:i] != b"\n").map(
            lambda i: ("cut", whole[:i])),
        st.tuples(st.integers(0, len(whole) - 1), st.sampled_from([b"\0", b"\xff", b"\xc3", b"\xed\xa0\x80"])).map(
            lambda a: ("bytes", whole[:a[0]] + a[1] + whole[a[0]:])),
        some_row.map(lambda i: ("extra field", b"\n".join([*lines[:i], lines[i] + b",x", *lines[i + 1:]]) + b"\n")),
        some_row.map(lambda i: ("repeated row", whole + lines[i] + b"\n")))


@settings(SETTINGS, max_examples=150)
@given(data=st.data(), tool=st.sampled_from(["compare", "export", "plot"]))
def test_generated_bad_files_are_one_error_line(cpu_run, data, tool):
    from results_fixtures import invoke

    header, rows = read_table(cpu_run)
    if data.draw(st.booleans(), label="a cell, else the bytes"):
        column, value = data.draw(cell_mutation(), label="cell")
        row = data.draw(st.integers(0, len(rows) - 1), label="row")
        what, bad_bytes = f"{column} = {value!r} in row {row + 1}", set_cell(column, value, row)(header, rows)
    else:
        what, bad_bytes = data.draw(byte_mutation(csv_bytes(header, rows)), label="file")
    TRIED.add(("generated file", repr(bad_bytes)))
    with tempfile.TemporaryDirectory() as tmp:
        bad = write_bad(Path(tmp), bad_bytes)
        args = {"compare": [cpu_run, bad], "export": [bad, "--format", "gab"], "plot": [bad, "--out", Path(tmp) / "p"]}
        assert_one_error(invoke(tool, *args[tool]), str(bad))


def threshold_valid(text: str) -> bool:
    number, scale = (text.strip()[:-1], 100) if text.strip().endswith("%") else (text, 1)
    return finite_number(number) and 0 <= float(number) / scale < 1


@SETTINGS
@given(flag=st.sampled_from(["--threshold", "--ignore"]), value=st.one_of(
    st.text(max_size=8), st.floats().map(repr), st.floats().map(lambda f: f"{f}%"),
    st.lists(st.sampled_from(["mode", "l2", "backend", "seed", "gpu", "median_ms", "Mode", " "]),
             max_size=3).map(",".join)))
def test_generated_flag_values(cpu_run, flag, value):
    from results_fixtures import invoke

    result = invoke("compare", cpu_run, cpu_run, f"{flag}={value}")
    names = [p.strip() for p in value.split(",") if p.strip()]
    valid = threshold_valid(value) if flag == "--threshold" else bool(names) and set(names) <= set(KEY_COLUMNS)
    if valid:  # compared, or (ignoring a column that tells rows apart) one clear error
        assert "Traceback" not in result.output, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        assert result.exit_code == 0 or result.output.strip().splitlines()[-1].startswith("error: "), result.output
    else:
        TRIED.add((flag, value))
        assert_one_error(result, flag)
