"""Bad inputs to plot, export and compare around `e2e --trace` runs: a kernel sweep where a served
trace is expected (and the reverse), a mix, a broken results.csv of a trace run, an output over an
input. Each ends in one `error:` line, exit 1, and every input left as it was."""

from __future__ import annotations

import hashlib

import pytest
from bad_input_cli import assert_one_error_line, invoke
from test_trace_results import synthetic

from attnbench.results.trace_results import metric_rows

KERNEL_RUN = "results/examples/h200-fa2-gqa-eager"


def digest(*dirs) -> str:
    h = hashlib.sha256()
    for d in dirs:
        for path in sorted(p for p in d.rglob("*") if p.is_file()):
            h.update(str(path).encode() + path.read_bytes())
    return h.hexdigest()


def trace_run(root, name: str = "t", edit=None):
    """A trace run's results.csv (synthetic GPU serves), edited as a test needs."""
    frame = metric_rows(synthetic("cuda", {"unified": [5.0, 5.2], "split": [6.0, 6.1]}))
    if edit:
        frame = edit(frame)
    (root / name).mkdir()
    frame.to_csv(root / name / "results.csv", index=False)
    return root / name


def setitem(frame, column, value, row=0):
    frame.loc[row, column] = value
    return frame


BROKEN = [
    ("serves_ms", lambda f: setitem(f.astype({"serves_ms": object}), "serves_ms", "abc")),
    ("serve_median_ms", lambda f: setitem(f, "serve_median_ms", -1.0)),
    ("wrong side", lambda f: setitem(f, "serve_min_ms", 1e9)),
    ("same configuration", lambda f: f.iloc[[0, 0]]),
    ("metric", lambda f: f.drop(columns=["metric"])),
    ("verdict is empty", lambda f: setitem(f.astype({"verdict": object}), "verdict", "")),
    ("max_num_seqs", lambda f: setitem(f.astype({"max_num_seqs": object}), "max_num_seqs", "many")),
]


@pytest.mark.parametrize("named, edit", BROKEN, ids=[b[0] for b in BROKEN])
@pytest.mark.parametrize("tool", ["export", "plot", "compare"])
def test_a_broken_trace_results_file_is_one_line(tool, named, edit, tmp_path):
    run = trace_run(tmp_path, edit=edit)
    before = digest(tmp_path)
    args = {"export": ["export", run, "--format", "md"], "plot": ["plot", run, "--out", tmp_path / "p"],
            "compare": ["compare", run, run]}[tool]
    assert_one_error_line(invoke(*args), named)
    assert digest(tmp_path) == before and not (tmp_path / "p").exists()


@pytest.mark.parametrize("order", ["kernel first", "trace first"])
@pytest.mark.parametrize("tool", ["compare", "plot"])
def test_a_kernel_sweep_beside_a_trace_run_is_one_line(tool, order, tmp_path):
    from pathlib import Path

    kernel = Path(__file__).parents[1] / KERNEL_RUN
    pair = [kernel, trace_run(tmp_path)]
    if order == "trace first":
        pair.reverse()
    before = digest(tmp_path, kernel)
    extra = ["--out", tmp_path / "p"] if tool == "plot" else []
    line = assert_one_error_line(invoke(tool, *pair, *extra), "of one kind")
    assert "served trace" in line and "kernel sweep" in line
    assert digest(tmp_path, kernel) == before and not (tmp_path / "p").exists()


def test_compare_refuses_an_ignore_column_a_trace_run_lacks_and_runs_with_nothing_in_common(tmp_path):
    a = trace_run(tmp_path, "a")
    b = trace_run(tmp_path, "b", edit=lambda f: f.assign(trace="other.jsonl"))
    before = digest(tmp_path)
    assert_one_error_line(invoke("compare", a, a, "--ignore", "input_len"), "--ignore")
    assert_one_error_line(invoke("compare", a, b), "no configuration in common")
    assert digest(tmp_path) == before


@pytest.mark.parametrize("target", ["results.csv", "."])
def test_export_never_writes_over_the_run_it_reads(target, tmp_path):
    run = trace_run(tmp_path)
    before = digest(tmp_path)
    assert_one_error_line(invoke("export", run, "--format", "csv", "--out", run / target), "--out")
    assert digest(tmp_path) == before


@pytest.mark.parametrize("tool", ["merge", "history"])
def test_merge_and_history_refuse_a_trace_run(tool, tmp_path):
    run = trace_run(tmp_path)
    (run / "env.json").write_text('{"command": "attnbench e2e --trace t.jsonl", "gpu": {"name": "H"}}')
    before = digest(tmp_path)
    args = (["merge", run, "--out", tmp_path / "m"] if tool == "merge"
            else ["history", "add", run, "--history", tmp_path / "h", "--commit", "abc", "--date", "2026-12-01"])
    assert_one_error_line(invoke(*args), "served trace")
    assert digest(tmp_path) == before and not (tmp_path / "m").exists() and not (tmp_path / "h").exists()
