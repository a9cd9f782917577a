"""Bad replicate flags of `attnbench kernel` (kernels/replicate_rule.py): one `error:` line naming
the flag, exit 1, no traceback, and the output directory neither made nor touched."""

from __future__ import annotations

import pytest

from tests.bad_input_cli import KERNEL, assert_one_error_line, invoke

BAD = [
    (["--replicates", "3", "--max-replicates", "4"], "--replicates/--max-replicates"),
    (["--replicates", "2", "--threshold", "3%"], "--replicates/--threshold"),
    (["--replicates", "2", "--min-replicates", "2"], "--replicates/--min-replicates"),
    (["--min-replicates", "1"], "--min-replicates"),
    (["--min-replicates", "0"], "--min-replicates"),
    (["--min-replicates", "-3"], "--min-replicates"),
    (["--min-replicates", "101"], "--min-replicates"),
    (["--max-replicates", "1"], "--max-replicates"),
    (["--min-replicates", "5", "--max-replicates", "3"], "--max-replicates"),
    (["--max-replicates", "101"], "--max-replicates"),
    (["--threshold", "0%"], "--threshold"),
    (["--threshold", "0"], "--threshold"),
    (["--threshold", "abc"], "--threshold"),
    (["--threshold", "150%"], "--threshold"),
    (["--threshold", "-2%"], "--threshold"),
    (["--threshold", "nan"], "--threshold"),
    (["--threshold", ""], "--threshold"),
    (["--max-replicates", "x"], "--max-replicates"),
]


@pytest.mark.parametrize("extra,named", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_replicate_flags(tmp_path, extra, named):
    out = tmp_path / "run"
    assert_one_error_line(invoke(*KERNEL, "--out", out, *extra), named)
    assert not out.exists()


def test_a_bad_flag_leaves_a_resumed_run_as_it_was(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "results.csv").write_text("kept\n")
    assert_one_error_line(invoke(*KERNEL, "--resume", out, "--threshold", "0%"), "--threshold")
    assert (out / "results.csv").read_text() == "kept\n" and sorted(p.name for p in out.iterdir()) == ["results.csv"]
