"""Paths, env.json files, flags and output paths that `compare`, `export` and `plot` cannot use:
one `error:` line naming the path or flag, exit 1, no traceback, and no input changed.

Each distinct invalid input tried is recorded in TRIED (`-s` prints the count).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from bad_results import assert_one_error, counted, every_tool

pytest_plugins = ["results_fixtures"]

TRIED: set[tuple[str, str]] = set()
count_what_was_tried = counted(TRIED, __name__)


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
