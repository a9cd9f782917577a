"""Bad input to e2e's stopping flags (--precision, --min-iters, --iters, --warmup), on the command
line and in scenario files: one `error:` line naming the flag, exit 1, no traceback, no run
directory made and no file of the user's touched (issue 20's adaptive stopping and CPU defaults).
"""

from __future__ import annotations

import pytest
from bad_input_cli import E2E, SETTINGS, assert_one_error_line, invoke
from hypothesis import given
from hypothesis import strategies as st

E2E_NO_ITERS = [a for i, a in enumerate(E2E) if a != "--iters" and (i == 0 or E2E[i - 1] != "--iters")]

STOPPING_BAD = [
    # --precision: a share of the p50 from 0 to 0.5, finite
    ("--precision", "-0.01"), ("--precision", "-1"), ("--precision", "nan"), ("--precision", "inf"),
    ("--precision", "-inf"), ("--precision", "0.51"), ("--precision", "1"), ("--precision", "100"),
    ("--precision", "1e308"), ("--precision", "x"), ("--precision", ""), ("--precision", "1%"),
    ("--precision", "0.01,0.02"), ("--precision", " "), ("--precision", "NaN"), ("--precision", "-0.0001"),
    # --min-iters: a count from 1 to 10,000, at most --iters
    ("--min-iters", "0"), ("--min-iters", "-1"), ("--min-iters", "20000"), ("--min-iters", "10001"),
    ("--min-iters", "x"), ("--min-iters", "1.5"), ("--min-iters", ""), ("--min-iters", "5"),
    ("--min-iters", "40", "--iters", "30"), ("--min-iters", "6,8"), ("--min-iters", "1e3"),
    # --iters / --warmup values not tried before
    ("--iters", "-5"), ("--iters", "10001"), ("--iters", "2.5"), ("--warmup", "1.5"), ("--warmup", "10001"),
]


@pytest.fixture
def users_file(tmp_path):
    """A file of the user's beside the run's --out: it must come through every refusal unchanged."""
    path = tmp_path / "notes.txt"
    path.write_text("mine\n")
    yield path
    assert path.read_text() == "mine\n"


@pytest.mark.parametrize("case", STOPPING_BAD, ids=map(repr, STOPPING_BAD))
def test_a_bad_stopping_flag_is_one_line(case, tmp_path, users_file):
    out = tmp_path / "out"
    assert_one_error_line(invoke(*E2E, *case, "--out", out), case[0])
    assert not out.exists()


def test_min_iters_above_the_cpus_iters_names_both(tmp_path, users_file):
    """--iters left out on the CPU is 3: a --min-iters above it is refused, not silently lowered."""
    out = tmp_path / "out"
    line = assert_one_error_line(invoke(*E2E_NO_ITERS, "--min-iters", "4", "--out", out), "--min-iters 4")
    assert "--iters 3" in line and not out.exists()


def test_min_iters_above_iters_in_an_existing_directory_changes_nothing(tmp_path, users_file):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.csv").write_text("a,b\n1,2\n")
    assert_one_error_line(invoke(*E2E, "--min-iters", "9", "--iters", "8", "--out", out, "--force"), "--min-iters")
    assert (out / "results.csv").read_text() == "a,b\n1,2\n"


SCENARIO_BAD = [('precision = nan', "--precision"), ('precision = -1.0', "--precision"),
                ('precision = "fast"', "precision"), ('min_iters = 0', "--min-iters"),
                ('min_iters = 50\niters = 3', "--min-iters"), ('min_iters = 2.5', "min_iters")]


@pytest.mark.parametrize("line, named", SCENARIO_BAD, ids=[c[0] for c in SCENARIO_BAD])
def test_a_bad_stopping_key_in_a_scenario_is_one_line(line, named, tmp_path, users_file):
    path = tmp_path / "s.toml"
    path.write_text(f'command = "e2e"\nmodel = "tiny"\n{line}\n')
    assert_one_error_line(invoke("run", path, "--check"), named)


@SETTINGS
@given(st.one_of(st.sampled_from([float("nan"), float("inf"), -float("inf")]),
                 st.floats(max_value=-1e-12, allow_nan=False, allow_infinity=False),
                 st.floats(min_value=0.5000001, allow_nan=False, allow_infinity=False)))
def test_any_precision_out_of_range_is_one_line(value):
    assert_one_error_line(invoke(*E2E, "--precision", repr(value)), "--precision")


@SETTINGS
@given(st.integers(1, 9_999).flatmap(lambda most: st.tuples(st.integers(most + 1, 10_000), st.just(most))))
def test_any_minimum_above_the_maximum_is_one_line(pair):
    least, most = pair
    line = assert_one_error_line(invoke(*E2E, "--min-iters", str(least), "--iters", str(most)), "--min-iters")
    assert f"--iters {most}" in line


@SETTINGS
@given(st.one_of(st.integers(max_value=0), st.integers(min_value=10_001)))
def test_any_min_iters_out_of_range_is_one_line(value):
    assert_one_error_line(invoke(*E2E, "--min-iters", str(value)), "--min-iters")
