"""Whatever `compare`, `export` and `plot` are given: one `error:` line naming the file (and column)
or the flag, exit 1, never a traceback and never a table made of garbage. Also: the tools on a
plain install (no pyarrow), results.csv as the one file every reader uses, and e2e results
compared, exported and plotted on their own key.

Bad inputs are listed (FILES, CELLS, E2E_FILES, PATHS, ENVS, FLAGS, OUTPUTS) and generated with
hypothesis. Each distinct invalid input tried is recorded in TRIED (`-s` prints the count).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbench.results import export
from attnbench.results.files import KEY_COLUMNS

pytest_plugins = ["results_fixtures"]

ROOT = Path(__file__).resolve().parent.parent
GRAPH, EAGER = (ROOT / "results" / "examples" / name for name in ("h200-fa2-gqa-graph", "h200-fa2-gqa-eager"))
NA_TEXT = {"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A",
           "NA", "NULL", "NaN", "None", "n/a", "nan", "null"}  # pandas reads these as an empty cell
TRIED: set[tuple[str, str]] = set()
SETTINGS = settings(max_examples=80, deadline=None, database=None, derandomize=True)


@pytest.fixture(scope="module", autouse=True)
def count_what_was_tried():
    yield
    print(f"\n{__name__}: {len(TRIED)} distinct invalid inputs tried")


def assert_one_error(result, *needles: str) -> None:
    """Exit 1, no traceback, and the last line of output is `error: ...` holding every needle."""
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 1, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("error: ") and all(n in last for n in needles), (needles, result.output)


# ---- results files, as text -------------------------------------------------------------------------

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
]
FILES += [(f"{column}={value!r}", set_cell(column, value), [column]) for column, value in CELLS]


def write_bad(tmp_path: Path, data: bytes) -> Path:
    (tmp_path / "bad").mkdir(exist_ok=True)
    (tmp_path / "bad" / "results.csv").write_bytes(data)
    return tmp_path / "bad" / "results.csv"


def every_tool(cli, good: Path, bad: Path, tmp_path: Path):
    return [cli("compare", good, bad), cli("compare", bad, good), cli("export", bad, "--format", "md"),
            cli("plot", bad, "--out", tmp_path / "plots")]


@pytest.mark.parametrize("case, mutate, needles", FILES, ids=[c[0] for c in FILES])
def test_a_bad_kernel_results_file_is_one_error_line(cpu_run, tmp_path, cli, case, mutate, needles):
    bad = write_bad(tmp_path, mutate(*read_table(cpu_run)))
    TRIED.add(("file", case))
    for result in every_tool(cli, cpu_run, bad, tmp_path):
        assert_one_error(result, str(bad), *needles)
    assert not (tmp_path / "plots").exists()


# ---- e2e results ---------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def e2e_run(tmp_path_factory) -> Path:
    """A tiny e2e run on the CPU, as `attnbench e2e` writes it."""
    from results_fixtures import invoke

    out = tmp_path_factory.mktemp("e2e") / "run"
    result = invoke("e2e", "--model", "tiny", "--device", "cpu", "--warmup", "1", "--iters", "2",
                    "--input-len", "8", "--output-len", "2", "--batch-size", "1,2", "--out", out)
    assert result.exit_code == 0, result.output
    return out


E2E_FILES = [
    ("no-p50", drop("request_p50_s"), ["request_p50_s"]), ("no-batch-size", drop("batch_size"), ["batch_size"]),
    ("cut", cut(0.4), []), ("duplicate-row", lambda h, r: csv_bytes(h, [*r, r[-1]]), ["same configuration"]),
    *[(f"{c}={v!r}", set_cell(c, v), [c]) for c, v in [
        ("request_p50_s", "slow"), ("request_p50_s", "nan"), ("request_p50_s", "0"), ("request_p90_s", "1e-12"),
        ("batch_size", "two"), ("input_len", "inf")]],
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
    assert result.exit_code == 1 and f"{len(df)} rows compared: {len(df)} slower" in result.output, result.output
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
    monkeypatch.setattr(export, "plot_e2e", lambda rows, out: seen.extend(sorted(set(rows["backend"]))) or [out])
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
                ["plot", e2e_run, "--out", tmp_path]]
    proc = subprocess.run([sys.executable, "-c", PLAIN_INSTALL, json.dumps([[str(a) for a in c] for c in commands])],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout.splitlines()[-1])
    assert all(clean and "Traceback" not in output for _, output, clean in results), results
    assert [code for code, _, _ in results] == [1, 0, 0, 0, 0, 1, 0, 0, 0]
    assert results[0][1].strip().splitlines()[-1].startswith("12 rows compared: 4 slower")
    assert len(json.loads((tmp_path / "graph.gab").read_text())) == 12
    assert pd.read_csv(tmp_path / "graph.csv").equals(pd.read_csv(GRAPH / "results.csv"))
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


# ---- paths, env.json, flags and outputs ----------------------------------------------------------------

def special(tmp_path: Path, what: str) -> Path:
    if what == "fifo":
        os.mkfifo(tmp_path / "pipe")
        return tmp_path / "pipe"
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    return tmp_path / "a"


PATHS = [  # (id, make(tmp_path, a good run) -> the path given, words the error line must hold)
    ("missing", lambda t, g: t / "nope", ["does not exist"]),
    ("missing-csv", lambda t, g: t / "nope" / "results.csv", ["does not exist"]),
    ("empty-directory", lambda t, g: t, ["holds no results.csv"]),
    ("parquet-only", lambda t, g: (shutil.copy(g / "results.csv", t / "results.parquet"), t)[1],
     ["only results.parquet"]),
    ("csv-is-a-directory", lambda t, g: ((t / "results.csv").mkdir(), t / "results.csv")[1], ["is a directory"]),
    ("csv-dir-in-run-dir", lambda t, g: ((t / "results.csv").mkdir(), t)[1], ["is a directory"]),
    ("under-a-file", lambda t, g: g / "results.csv" / "results.csv", ["is a file, not a directory"]),
    ("device-file", lambda t, g: Path("/dev/null"), ["not a regular file"]),
    ("fifo", lambda t, g: special(t, "fifo"), ["not a regular file"]),
    ("symlink-loop", lambda t, g: special(t, "loop"), ["does not exist"]),
    ("name-too-long", lambda t, g: t / ("x" * 300), ["does not exist"]),
    ("env-json-as-results", lambda t, g: g / "env.json", ["JSON"]),
    ("summary-md-as-results", lambda t, g: g / "summary.md", ["summary.md"]),
    ("png-as-results", lambda t, g: next(g.glob("*.png")), ["NUL"]),
]


@pytest.mark.parametrize("case, make, needles", PATHS, ids=[c[0] for c in PATHS])
def test_a_path_that_is_not_a_results_file_is_one_error_line(cpu_run, tmp_path, cli, case, make, needles):
    bad = make(tmp_path, cpu_run)
    TRIED.add(("path", case))
    for result in every_tool(cli, cpu_run, bad, tmp_path):
        assert_one_error(result, *needles)


ENVS = [("not-json", b'{"gpu": '), ("empty", b""), ("a-list", b"[1, 2, 3]\n"), ("a-string", b'"H200"\n'),
        ("latin-1", '{"gpu": "é"}'.encode("latin-1")), ("binary", bytes(range(256))), ("deep", b"[" * 100000),
        ("a-directory", None)]


@pytest.mark.parametrize("case, data", ENVS, ids=[c[0] for c in ENVS])
def test_a_broken_env_json_is_one_error_line(cpu_run, tmp_path, cli, case, data):
    (tmp_path / "run").mkdir()
    shutil.copy(cpu_run / "results.csv", tmp_path / "run")
    env = tmp_path / "run" / "env.json"
    if data is None:
        env.mkdir()
    else:
        env.write_bytes(data)
    TRIED.add(("env.json", case))
    assert_one_error(cli("compare", cpu_run, tmp_path / "run"), "NEW", str(env))
    assert_one_error(cli("compare", tmp_path / "run", cpu_run), "BASE", str(env))


def test_a_deeply_nested_env_json_is_compared_not_a_recursion_error(cpu_run, tmp_path, cli):
    shutil.copytree(cpu_run, tmp_path / "run")
    deep = {"gpu": {"name": "H200"}}
    for _ in range(500):
        deep = {"x": deep}
    (tmp_path / "run" / "env.json").write_text(json.dumps(deep))
    result = cli("compare", cpu_run, tmp_path / "run")
    assert result.exit_code == 0 and "environments differ" in result.output, result.output


FLAGS = [  # (command, flags, what the error line names)
    *[("compare", ["--threshold", t], "--threshold") for t in (
        "abc", "-5%", "nan", "nan%", "1e309", "1e309%", "inf", "-inf", "100%", "1", "150%", "5%%", "", " ", "%", "0x10",
        "five", "-0.01")],
    *[("compare", ["--ignore", i], "--ignore") for i in ("gpu", "bogus", ",", "", "mode,request_p50_s", "median_ms")],
    ("compare", ["--ignore", "num_tokens"], "share a configuration key"),
    *[("export", ["--format", f], "--format") for f in ("xml", "", "GAB", "json")],
    ("plot", ["--label", "one"], "--label"), ("plot", ["--label", "a", "--label", "b", "--label", "c"], "--label"),
    ("plot", ["--label", "same", "--label", "same"], "--label"),
]


@pytest.mark.parametrize("command, args, needle", FLAGS, ids=[f"{c} {' '.join(a)}" for c, a, _ in FLAGS])
def test_a_bad_flag_is_one_error_line(cpu_run, tmp_path, cli, command, args, needle):
    TRIED.add((command, repr(args)))
    inputs = {"compare": [cpu_run, cpu_run], "export": [cpu_run], "plot": [cpu_run, cpu_run, "--out", tmp_path]}
    assert_one_error(cli(command, *inputs[command], *args), needle)


OUTPUTS = [  # (id, where (given the run and tmp_path), the command, what the error line names)
    ("over-its-results-csv", lambda g, t: g / "results.csv", "export", "--out"),
    ("over-its-env-json", lambda g, t: g / "env.json", "export", "--out"),
    ("over-its-parquet", lambda g, t: g / "results.parquet", "export", "--out"),
    ("over-a-link-to-it", lambda g, t: ((t / "link").symlink_to(g / "results.csv"), t / "link")[1], "export", "--out"),
    ("into-a-directory", lambda g, t: t, "export", "--out"),
    ("under-a-file", lambda g, t: g / "summary.md" / "x.md", "export", "--out"),
    ("missing-parent", lambda g, t: t / "no" / "such" / "x.md", "export", "--out"),
    ("name-too-long", lambda g, t: t / ("x" * 300), "export", "--out"),
    ("a-full-disk", lambda g, t: Path("/dev/full"), "export", "--out"),
    ("sysfs", lambda g, t: Path("/sys/attnbench.md"), "export", "--out"),
    ("over-its-results-csv", lambda g, t: g / "results.csv", "compare", "--markdown"),
    ("into-a-directory", lambda g, t: t, "compare", "--markdown"),
    ("under-a-file", lambda g, t: g / "env.json" / "c.md", "compare", "--markdown"),
    ("a-file", lambda g, t: g / "summary.md", "plot", "is a file"),
    ("under-a-file", lambda g, t: g / "summary.md" / "plots", "plot", "plots"),
    ("sysfs", lambda g, t: Path("/sys/attnbench-plots"), "plot", "plots"),
]


@pytest.mark.parametrize("case, where, command, needle", OUTPUTS, ids=[f"{c[2]}-{c[0]}" for c in OUTPUTS])
def test_an_output_that_cannot_or_must_not_be_written_is_one_error_line(cpu_run, tmp_path, cli, case, where,
                                                                        command, needle):
    run = shutil.copytree(cpu_run, tmp_path / "run")
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    args = {"export": [run, "--format", "csv", "--out"], "compare": [run, run, "--markdown"], "plot": [run, "--out"]}
    TRIED.add(("output", f"{command} {case}"))
    assert_one_error(cli(command, *args[command], where(run, tmp_path)), needle)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before, "an input was changed"


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
