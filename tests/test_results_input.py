"""Whatever results file `compare`, `export` and `plot` are given: one `error:` line naming the
file (and column), exit 1, never a traceback and never a table made of garbage. Also: the tools
on a plain install (no pyarrow), results.csv as the one file every reader uses, and e2e results
compared, exported and plotted on their own key.

Bad files are listed here (FILES, CELLS, E2E_FILES); paths, env.json, flags and outputs are in
test_results_input_paths.py, generated inputs in test_results_input_generated.py. Each distinct
invalid input tried is recorded in TRIED (`-s` prints the count).
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from bad_results import (assert_one_error, counted, csv_bytes, cut, drop, every_tool, raw, read_table, set_cell,
                         write_bad)

from attnbench.results import export

pytest_plugins = ["results_fixtures"]

ROOT = Path(__file__).resolve().parent.parent
GRAPH, EAGER = (ROOT / "results" / "examples" / name for name in ("h200-fa2-gqa-graph", "h200-fa2-gqa-eager"))
TRIED: set[tuple[str, str]] = set()
count_what_was_tried = counted(TRIED, __name__)


# ---- results files, as text -------------------------------------------------------------------------

FILES = [  # (id, mutate(header, rows) -> the file's bytes, words the error line must hold)
    ("empty", raw(b""), ["is empty"]),
    ("blank-lines", raw(b"\n\n  \n"), ["is empty"]),
    ("byte-order-mark-only", raw("\ufeff\u3000\n".encode()), ["is empty"]),
    ("header-only", lambda h, r: csv_bytes(h, []), ["no rows"]),
    ("header-only-no-newline", lambda h, r: ",".join(h).encode(), ["no rows"]),
    ("cut-mid-row", cut(0.5), ["row"]),
    ("cut-near-row-end", cut(0.97), ["cut short"]),
    ("cut-one-byte-into-row", cut(0.0), ["row"]),
    ("binary", raw(bytes(range(256)) * 4), ["NUL"]),
    ("nul-filled", raw(b"\0" * 4096), ["NUL"]),
    ("png", raw(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(64)), ["NUL"]),
    ("latin-1", lambda h, r: csv_bytes(h, r).replace(b"reference", "référence".encode("latin-1")), ["UTF-8"]),
    ("utf-16", lambda h, r: csv_bytes(h, r).decode().encode("utf-16"), []),
    ("json-object", raw(b'{"kind": "decode", "median_ms": 1.0}\n'), ["JSON"]),
    ("json-list", raw(b'[{"kind": "decode"},\n {"kind": "prefill"}]\n'), ["JSON"]),
    ("prose", raw(b"hello world\nthis is not a results file\n"), ["not an attnbench results file"]),
    ("tab-separated", lambda h, r: csv_bytes(h, r).replace(b",", b"\t"), ["not an attnbench results file"]),
    ("semicolons", lambda h, r: csv_bytes(h, r).replace(b",", b";"), ["not an attnbench results file"]),
    ("unrelated-csv", raw(b"a,b,c\n1,2,3\n"), ["not an attnbench results file"]),
    ("no-median", drop("median_ms"), ["median_ms"]),
    ("no-verdict", drop("verdict"), ["verdict"]),
    ("no-shape", drop("num_heads", "backend"), ["num_heads", "backend"]),
    ("e2e-and-kernel-columns", lambda h, r: csv_bytes([*h, "request_p50_s"], [[*x, "1.0"] for x in r]), ["both"]),
    ("heads-bool", lambda h, r: set_cell("num_heads", "True")(h, [[*x[:2], "False", *x[3:]] for x in r]),
     ["num_heads"]),
    ("duplicate-row", lambda h, r: csv_bytes(h, [*r, r[0]]), ["same configuration"]),
    ("duplicate-header", lambda h, r: csv_bytes([*h[:-1], h[0]], r), ["more than once"]),
    ("extra-field", lambda h, r: csv_bytes(h, [r[0] + ["x"], *r[1:]]), ["field"]),
    ("missing-field-mid-file", lambda h, r: csv_bytes(h, [r[0], r[1][:-3], *r[2:]]), ["row 2"]),
    ("unterminated-quote", lambda h, r: csv_bytes(h, r) + b'decode,"8\n', ["field"]),
    ("index-column", lambda h, r: csv_bytes(["", *h], [[str(i), *x] for i, x in enumerate(r)])[1:], ["field"]),
]
CELLS = [  # (column, value) set in the first row, a timed one; the error line names both
    ("median_ms", "abc"), ("median_ms", "inf"), ("median_ms", "-inf"), ("median_ms", "nan"), ("median_ms", ""),
    ("median_ms", "0"), ("median_ms", "-0.5"), ("median_ms", "1e309"), ("median_ms", "1.0 2.0"),
    ("p10_ms", "1e6"), ("p90_ms", "1e-9"), ("p90_ms", "fast"), ("samples_ms", "0.1 0.2 x"),
    ("samples_ms", "0.1 -0.2 0.3"), ("samples_ms", "0.1 inf"), ("samples", "many"), ("tflops", "lots"),
    ("num_tokens", "abc"), ("num_tokens", "bfloat16"), ("num_heads", ""), ("prefix_ratio", "inf"), ("seed", "1e999"),
    ("kind", "bogus"), ("kind", "[/bold]"), ("verdict", ""), ("verdict", "   "),
    ("num_tokens", "8.5"), ("num_heads", "nan"), ("num_seqs", "many"), ("batch_tokens", "2.5"), ("replicates", "x"),
    ("max_kv_len", "inf"),
]
FILES += [(f"{column}={value!r}", set_cell(column, value), [column]) for column, value in CELLS]


@pytest.mark.parametrize("case, mutate, needles", FILES, ids=[c[0] for c in FILES])
def test_a_bad_kernel_results_file_is_one_error_line(cpu_run, tmp_path, cli, case, mutate, needles):
    bad = write_bad(tmp_path, mutate(*read_table(cpu_run)))
    TRIED.add(("file", case))
    for result in every_tool(cli, cpu_run, bad, tmp_path):
        assert_one_error(result, str(bad), *needles)
    assert not (tmp_path / "plots").exists()


# ---- e2e results ---------------------------------------------------------------------------------------

E2E_FILES = [
    ("no-p50", drop("request_p50_s"), ["request_p50_s"]), ("no-batch-size", drop("batch_size"), ["batch_size"]),
    ("cut", cut(0.4), []), ("duplicate-row", lambda h, r: csv_bytes(h, [*r, r[-1]]), ["same configuration"]),
    *[(f"{c}={v!r}", set_cell(c, v), [c]) for c, v in [
        ("request_p50_s", "slow"), ("request_p50_s", "nan"), ("request_p50_s", "0"), ("request_p90_s", "1e-12"),
        ("batch_size", "two"), ("input_len", "inf"), ("batch_size", "1.5"), ("iters", "thirty"), ("graphs", "0.5"),
        ("run_p50_s", "soon")]],
]


@pytest.mark.parametrize("case, mutate, needles", E2E_FILES, ids=[c[0] for c in E2E_FILES])
def test_a_bad_e2e_results_file_is_one_error_line(e2e_run, tmp_path, cli, case, mutate, needles):
    bad = write_bad(tmp_path, mutate(*read_table(e2e_run)))
    TRIED.add(("e2e file", case))
    for result in every_tool(cli, e2e_run, bad, tmp_path):
        assert_one_error(result, str(bad), *needles)


def test_e2e_results_compare_on_their_own_key(e2e_run, cpu_run, tmp_path, cli):
    same = cli("compare", e2e_run, e2e_run)
    assert same.exit_code == 0 and "base s" in same.output and "0 slower" in same.output, same.output
    df = pd.read_csv(e2e_run / "results.csv")
    (tmp_path / "slow").mkdir()
    df.assign(**{c: df[c] * 1.5 for c in ("request_p50_s", "request_p90_s", "request_p99_s")}).to_csv(
        tmp_path / "slow" / "results.csv", index=False)
    result = cli("compare", e2e_run, tmp_path / "slow", "--markdown", tmp_path / "c.md")
    # CPU timings get no verdict (issue 20); tests/test_verdicts.py has GPU-labelled e2e pairs
    assert result.exit_code == 0 and f"{len(df)} rows compared: 0 slower" in result.output, result.output
    assert f"{len(df)} unjudged" in result.output and result.output.count("CPU timings: no verdict") == 1
    report = (tmp_path / "c.md").read_text()
    assert "| row | base s | new s |" in report and "(median only)" in report
    for args, needles in [(["--ignore", "num_tokens"], ["--ignore", "e2e"]),
                          (["--ignore", "strategy"], ["share a configuration key"])]:
        TRIED.add(("e2e flag", repr(args)))
        assert_one_error(cli("compare", e2e_run, e2e_run, *args), *needles)
    for args in (["compare", cpu_run, e2e_run], ["compare", e2e_run, cpu_run],
                 ["plot", cpu_run, e2e_run, "--out", tmp_path]):
        TRIED.add(("kernel with e2e", repr(args[:2])))
        assert_one_error(cli(*args), "kernel sweep", "e2e run", "one kind")


def test_e2e_results_export_and_plot(e2e_run, tmp_path, cli, monkeypatch):
    df = pd.read_csv(e2e_run / "results.csv")
    entries = json.loads(cli("export", e2e_run, "--format", "gab").stdout)
    assert [e["value"] for e in entries] == list(df["request_p50_s"])
    assert {e["unit"] for e in entries} == {"s"} and len({e["name"] for e in entries}) == len(df)
    assert "unified p50 s" in cli("export", e2e_run, "--format", "md").stdout
    back = pd.read_csv(io.StringIO(cli("export", e2e_run, "--format", "csv").stdout))
    pd.testing.assert_frame_equal(back[df.columns], df, check_dtype=False)
    assert cli("plot", e2e_run, "--out", tmp_path / "one").exit_code == 0
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["e2e_latency.png", "e2e_ratio.png"]
    seen = []
    monkeypatch.setattr(export, "plot_e2e",
                        lambda rows, out: seen.extend(sorted(set(rows["run"] + " " + rows["backend"]))) or [out])
    assert cli("plot", e2e_run, e2e_run / "results.csv", "--label", "a", "--label", "b",
               "--out", tmp_path / "two").exit_code == 0
    assert seen == ["a reference", "b reference"]  # each run's lines under its own label


# ---- a plain install: no pyarrow -----------------------------------------------------------------------

# A fresh interpreter in which importing pyarrow fails before pandas is imported, as after
# `pip install -e .` without the parquet extra. (Blocking pyarrow in this process would not do:
# pandas, imported already, has chosen pyarrow-backed strings and needs pyarrow to read any CSV.)
PLAIN_INSTALL = """
import json, sys
sys.modules["pyarrow"] = sys.modules["fastparquet"] = None
from typer.testing import CliRunner
from attnbench.cli.main import app
results = [CliRunner().invoke(app, args) for args in json.loads(sys.argv[1])]
print(json.dumps([[r.exit_code, r.output, isinstance(r.exception, (SystemExit, type(None)))] for r in results]))
"""


@pytest.mark.skipif(not (GRAPH / "results.parquet").exists(), reason="the H200 example runs are absent")
def test_the_results_tools_work_without_pyarrow(e2e_run, tmp_path):
    commands = [["compare", GRAPH, EAGER, "--ignore", "mode"],
                *[["export", GRAPH, "--format", f, "--out", tmp_path / f"graph.{f}"] for f in ("gab", "md", "csv")],
                ["plot", GRAPH, EAGER, "--out", tmp_path / "plots"],
                ["export", GRAPH / "results.parquet", "--format", "md"],
                ["compare", e2e_run, e2e_run], ["export", e2e_run, "--format", "gab"],
                ["plot", e2e_run, "--out", tmp_path / "e2e-plots"]]  # a new directory: plot refuses a non-empty one
    proc = subprocess.run([sys.executable, "-c", PLAIN_INSTALL, json.dumps([[str(a) for a in c] for c in commands])],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout.splitlines()[-1])
    assert all(clean and "Traceback" not in output for _, output, clean in results), results
    assert [code for code, _, _ in results] == [1, 0, 0, 0, 0, 1, 0, 0, 0]
    assert results[0][1].strip().splitlines()[-1].startswith("12 rows compared: 4 slower")
    assert len(json.loads((tmp_path / "graph.gab").read_text())) == 12
    exported = pd.read_csv(tmp_path / "graph.csv")  # with the key column added since, at the value it meant
    assert (exported.pop("decode_seqs") == 0).all() and exported.equals(pd.read_csv(GRAPH / "results.csv"))
    assert {p.name for p in (tmp_path / "plots").iterdir()} == {"latency_h32kv8_d128.png", "ratio_h32kv8_d128.png"}
    TRIED.add(("plain install", "a .parquet path"))
    assert results[5][1].startswith("error: RESULTS:") and "needs pyarrow" in results[5][1]


def test_results_csv_is_read_even_beside_a_stale_parquet(cpu_run, tmp_path, cli):
    pytest.importorskip("pyarrow")
    shutil.copytree(cpu_run, tmp_path / "rerun")
    df = pd.read_csv(cpu_run / "results.csv")
    df.assign(median_ms=df["median_ms"] * 3).to_parquet(tmp_path / "rerun" / "results.parquet")  # an older run's
    result = cli("export", tmp_path / "rerun", "--format", "gab")
    assert [e["value"] for e in json.loads(result.stdout)] == list(df["median_ms"])
    TRIED.add(("file", "parquet that is text"))
    (tmp_path / "rerun" / "results.parquet").write_text("not parquet\n")
    assert_one_error(cli("export", tmp_path / "rerun" / "results.parquet", "--format", "md"), "parquet")
