"""Bad input to the readers of results files and to `attnbench merge` (issue 20): each is one `error:`
line naming the file (and the field, when a field is wrong), exit 1, no traceback, nothing changed.

Merge: shards of other sweeps or splits, a shard missing or twice, a whole run beside shards (unless
--partial), an --out that is or holds an input even with --force. Readers: env.json, agreement.csv
and telemetry.csv with wrong types, missing fields, binary bytes, a cut or a quote left open, through
merge, compare and both --resume. The shards are cpu_run (results_fixtures) split by point, so only
one tiny e2e run is measured here. `-s` prints how many distinct bad inputs were tried.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from bad_input_cli import E2E, KERNEL, assert_one_error_line, invoke
from bad_results import counted, csv_bytes, drop, refused, set_cell, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbench.errors import AttnbenchError
from attnbench.results.schema import read_env
from attnbench.results.telemetry import read_telemetry

pytest_plugins = ["results_fixtures"]
TRIED: set[tuple[str, str]] = set()
count_what_was_tried = counted(TRIED, __name__)
TELEMETRY = b"time_unix,sm_clock_mhz,mem_clock_mhz,temp_c,power_w,reasons,source\n1.5,1980.0,2619.0,35.0,120.5,0x4,nvml\n"


def measured(run: Path) -> dict[str, bytes]:
    """What a refused --resume must keep (it clears the outputs made from these first: runs/rundir.py)."""
    return {name: (run / name).read_bytes() for name in ("results.csv", "env.json", "agreement.csv")}


def shard_of(run: Path, rows: list[list[str]], header: list[str], out: Path, index: int, count: int,
             command: str) -> Path:
    out.mkdir(parents=True)
    (out / "results.csv").write_bytes(csv_bytes(header, rows))
    env = {**json.loads((run / "env.json").read_text()), "command": f"{command} --shard {index}/{count} --out {out}",
           "shard": {"index": index, "count": count, "points": 1}}
    (out / "env.json").write_text(json.dumps(env))


@pytest.fixture(scope="module")
def shards(cpu_run, tmp_path_factory) -> Path:
    """cpu_run's rows as shards 0/2 and 1/2 (one number of tokens each), shard 1/3 of the same
    sweep, and shard 1/2 of another (--heads 8); s0 with a telemetry.csv."""
    root = tmp_path_factory.mktemp("shards")
    with open(cpu_run / "results.csv", newline="") as f:
        header, *rows = list(csv.reader(f))
    tokens = header.index("num_tokens")
    first = [r for r in rows if r[tokens] == rows[0][tokens]]
    rest = [r for r in rows if r[tokens] != rows[0][tokens]]
    command = json.loads((cpu_run / "env.json").read_text())["command"].split(" --out")[0]
    shard_of(cpu_run, first, header, root / "s0", 0, 2, command)
    shard_of(cpu_run, rest, header, root / "s1", 1, 2, command)
    shard_of(cpu_run, rest, header, root / "t1", 1, 3, command)
    shard_of(cpu_run, rest, header, root / "h1", 1, 2, command.replace("--heads 4", "--heads 8"))
    shutil.copytree(root / "s0", root / "s0-copy")
    (root / "s0" / "telemetry.csv").write_bytes(TELEMETRY)
    return root


@pytest.fixture(scope="module")
def e2e_run(tmp_path_factory) -> Path:
    result = invoke(*E2E, "--out", out := tmp_path_factory.mktemp("e2e") / "run")
    assert result.exit_code == 0 and (out / "agreement.csv").is_file(), result.output
    return out


def test_shards_of_one_whole_split_merge_and_say_so(shards, tmp_path):
    result = invoke("merge", shards / "s0", shards / "s1", "--out", tmp_path / "all")
    assert result.exit_code == 0, result.output
    merged = json.loads((tmp_path / "all" / "env.json").read_text())["merged"]
    assert merged["complete"] is True and merged["missing_shards"] == [] and "partial" not in merged
    assert (tmp_path / "all" / "telemetry.csv").read_bytes() == TELEMETRY


SPLITS = [  # (case, inputs, words of the error line)
    ("other-sweep", ["s0", "h1"], ["different sweeps", "--heads", "'4'", "'8'", "--partial"]),
    ("other-split", ["s0", "t1"], ["different splits", "0/2", "1/3"]),
    ("shard-missing", ["s0"], ["1/2", "not among the inputs"]),
    ("shard-twice", ["s0", "s0-copy", "s1"], ["both hold shard 0/2"]),
    ("whole-run-beside-shards", ["s0", "cpu"], ["whole run"]),
]


@pytest.mark.parametrize("case, inputs, named", SPLITS, ids=[c[0] for c in SPLITS])
def test_shards_that_are_not_one_whole_split_need_partial(shards, cpu_run, tmp_path, case, inputs, named):
    TRIED.add(("merge", case))
    paths = [cpu_run if i == "cpu" else shards / i for i in inputs]
    refused(["merge", *paths, "--out", tmp_path / "all"], named, shards)
    assert not (tmp_path / "all").exists()
    if case == "shard-twice":
        return  # s0 and its copy hold the same rows: with --partial they are kept once
    result = invoke("merge", *paths, "--out", tmp_path / "all", "--partial")
    assert result.exit_code == 0, result.output
    merged = json.loads((tmp_path / "all" / "env.json").read_text())["merged"]
    assert merged["complete"] is False and merged["partial"], merged


OUTS = [  # (case, --out given the shards' directory `root`)
    ("parent-of-inputs", lambda root: root),
    ("grandparent-of-inputs", lambda root: root.parent),
    ("an-input", lambda root: root / "s1"),
    ("link-to-the-parent", lambda root: link(root.parent / "link-to-shards", root)),
]


def link(path: Path, target: Path) -> Path:
    path.is_symlink() or path.symlink_to(target, target_is_directory=True)
    return path


@pytest.mark.parametrize("case, out", OUTS, ids=[c[0] for c in OUTS])
def test_out_that_is_or_holds_an_input_is_refused_even_with_force(shards, case, out):
    TRIED.add(("merge --out --force", case))
    refused(["merge", shards / "s0", shards / "s1", "--out", out(shards), "--force"], ["--out", "merged"], shards)


# ---- env.json ----------------------------------------------------------------------------------------

ENV_FIELDS = [  # (case, the entries changed, the field the error names)
    ("shard-index-string", {"shard": {"index": "zero", "count": 2}}, "shard.index"),
    ("shard-index-float", {"shard": {"index": 0.5, "count": 2}}, "shard.index"),
    ("shard-index-true", {"shard": {"index": True, "count": 2}}, "shard.index"),
    ("shard-count-list", {"shard": {"index": 0, "count": [2]}}, "shard.count"),
    ("shard-count-missing", {"shard": {"index": 0}}, "shard.count"),
    ("shard-a-list", {"shard": [0, 2]}, "shard"),
    ("shard-a-string", {"shard": "0/2"}, "shard"),
    ("shard-index-past-count", {"shard": {"index": 2, "count": 2}}, "shard"),
    ("shard-count-zero", {"shard": {"index": 0, "count": 0}}, "shard"),
    ("distributed-ranks-an-object", {"distributed": {"ranks": {"0": "ok"}}}, "distributed.ranks"),
    ("distributed-ranks-null", {"distributed": {"ranks": None}}, "distributed.ranks"),
    ("distributed-rank-string", {"distributed": {"ranks": [{"rank": "0", "status": "ok"}]}}, "distributed.ranks[0].rank"),
    ("distributed-status-missing", {"distributed": {"ranks": [{"rank": 0}]}}, "distributed.ranks[0].status"),
    ("distributed-rank-twice", {"distributed": {"ranks": [{"rank": 0, "status": "ok"}] * 2}}, "distributed.ranks"),
    ("distributed-a-list", {"distributed": [1, 2]}, "distributed"),
    ("gpu-a-string", {"gpu": "NVIDIA H200"}, "gpu"),
    ("gpu-name-a-number", {"gpu": {"name": 5}}, "gpu.name"),
    ("command-a-list", {"command": ["attnbench", "kernel"]}, "command"),
    ("torch-a-number", {"torch": 2.5}, "torch"),
    ("backend-libraries-a-list", {"backend_libraries": ["torch"]}, "backend_libraries"),
    ("backend-library-a-number", {"backend_libraries": {"flex": 3}}, "backend_libraries.flex"),
]


@pytest.mark.parametrize("case, change, field", ENV_FIELDS, ids=[c[0] for c in ENV_FIELDS])
def test_an_env_json_field_of_the_wrong_type_is_refused_by_merge_and_compare(shards, tmp_path, case, change, field):
    TRIED.add(("env.json", case))
    bad = Path(shutil.copytree(shards / "s0", tmp_path / "bad"))
    (bad / "env.json").write_text(json.dumps({**json.loads((bad / "env.json").read_text()), **change}))
    named = [f"{bad}/env.json", f"{field} "]
    refused(["merge", bad, shards / "s1", "--out", tmp_path / "all", "--partial"], named, bad, shards)
    refused(["compare", shards / "s0", bad], named, bad)
    assert not (tmp_path / "all").exists()


WRONG = st.one_of(st.text(max_size=5), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                  st.integers(), max_size=2), st.none(), st.booleans(), st.floats(allow_nan=True, allow_infinity=True))
SCHEMA = {  # field: (the entries around it, where the value goes, values that fit)
    "shard.index": (lambda v: {"shard": {"index": v, "count": 4}}, lambda v: isinstance(v, int) and not
                    isinstance(v, bool) and 0 <= v < 4),
    "shard.count": (lambda v: {"shard": {"index": 0, "count": v}}, lambda v: isinstance(v, int) and not
                    isinstance(v, bool) and v > 0),
    "distributed.ranks[0].rank": (lambda v: {"distributed": {"ranks": [{"rank": v, "status": "ok"}]}},
                                  lambda v: v == 0 and not isinstance(v, (bool, float))),
    "e2e.tp.size": (lambda v: {"e2e": {"model_args": {}, "tp": {"size": v}}}, lambda v: isinstance(v, int) and not
                    isinstance(v, bool)),
    "e2e.model_args": (lambda v: {"e2e": {"model_args": v}}, lambda v: isinstance(v, dict)),
    "gpu": (lambda v: {"gpu": v}, lambda v: v is None or isinstance(v, dict) and "name" not in v),
}


@settings(max_examples=60, deadline=None, database=None, derandomize=True)
@given(field=st.sampled_from(sorted(SCHEMA)), value=WRONG)
def test_generated_wrong_types_in_env_json_name_the_field(field, value):
    place, fits = SCHEMA[field]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "env.json"
        path.write_text(json.dumps({"command": "attnbench kernel", **place(value)}))
        if fits(value):
            read_env(path)
            return
        TRIED.add(("env.json generated", f"{field}={value!r}"))
        with pytest.raises(AttnbenchError) as error:
            read_env(path)
        assert str(error.value).startswith(f"{path}: {field.split('[')[0]}"), str(error.value)
        assert "\n" not in str(error.value)


# ---- telemetry.csv and agreement.csv --------------------------------------------------------------------

TABLES = [  # (case, file, its bytes, words the error names)
    ("telemetry-binary", "telemetry.csv", bytes(range(256)), ["NUL"]),
    ("telemetry-latin-1", "telemetry.csv", TELEMETRY.replace(b"nvml", "nvmlé".encode("latin-1")), ["UTF-8"]),
    ("telemetry-quote-left-open", "telemetry.csv", TELEMETRY.replace(b",nvml", b',"nvml'), ["unexpected end"]),
    ("telemetry-clock-a-word", "telemetry.csv", TELEMETRY.replace(b"1980.0", b"fast"), ["row 1", "sm_clock_mhz"]),
    ("telemetry-reasons-not-hex", "telemetry.csv", TELEMETRY.replace(b"0x4", b"0xzz"), ["row 1", "reasons"]),
    ("telemetry-cut-mid-row", "telemetry.csv", TELEMETRY[:-12], ["row 1"]),
    ("telemetry-a-field-too-many", "telemetry.csv", TELEMETRY.replace(b",nvml", b",nvml,x"), ["row 1", "field"]),
    ("telemetry-empty", "telemetry.csv", b"", ["is empty"]),
    ("telemetry-json", "telemetry.csv", b'{"sm_clock_mhz": 1980}\n', ["JSON"]),
]


@pytest.mark.parametrize("case, name, data, named", TABLES, ids=[c[0] for c in TABLES])
def test_a_bad_telemetry_csv_is_refused_by_merge(shards, tmp_path, case, name, data, named):
    TRIED.add(("table", case))
    bad = Path(shutil.copytree(shards / "s0", tmp_path / "bad"))
    (bad / name).write_bytes(data)
    refused(["merge", bad, shards / "s1", "--out", tmp_path / "all"], [f"{bad}/{name}", *named], bad, shards)
    assert not (tmp_path / "all").exists()


@settings(max_examples=60, deadline=None, database=None, derandomize=True)
@given(cut=st.integers(0, len(TELEMETRY) - 1), noise=st.binary(max_size=6), at=st.integers(0, len(TELEMETRY)))
def test_generated_corrupt_telemetry_is_read_whole_or_refused_in_one_line(cut, noise, at):
    """A telemetry.csv cut short, or with bytes put in anywhere: read back as valid rows, or one error."""
    data = (TELEMETRY[:at] + noise + TELEMETRY[at:])[:len(TELEMETRY) + len(noise) - cut]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "telemetry.csv").write_bytes(data)
        try:
            header, rows = read_telemetry(Path(tmp) / "telemetry.csv")
        except AttnbenchError as exc:
            TRIED.add(("telemetry.csv generated", repr(data)))
            assert str(exc).startswith(f"{tmp}/telemetry.csv") and "\n" not in str(exc), str(exc)
            return
        numbers = [float(row[c]) for row in rows for c in header[:5]] + [int(row["reasons"], 16) for row in rows]
        assert header == TELEMETRY.split(b"\n")[0].decode().split(",") and len(numbers) == 6 * len(rows)


def agreement_with(run: Path, column: str, value: str | None) -> bytes:
    header, *rows = list(csv.reader(io.StringIO((run / "agreement.csv").read_text())))
    if value is not None:
        return set_cell(column, value)(header, rows)
    return drop(column)(header, rows)


AGREEMENTS = [  # (case, column, value: None drops the column, the words the error names)
    ("input-len-a-word", "input_len", "eight", ["row 1", "input_len", "not an integer"]),
    ("input-len-a-fraction", "input_len", "8.5", ["row 1", "input_len", "not an integer"]),
    ("batch-size-nan", "batch_size", "nan", ["row 1", "batch_size", "not an integer"]),
    ("tokens-equal-a-word", "tokens_equal", "all", ["row 1", "tokens_equal", "not a number"]),
    ("diverged-requests-a-list", "diverged_requests", "[1]", ["row 1", "diverged_requests"]),
    ("no-verdict-column", "verdict", None, ["lacks column", "verdict"]),
    ("no-output-len-column", "output_len", None, ["lacks column", "output_len"]),
    ("backend-empty", "backend", "", ["row 1", "backend is empty"]),
]


@pytest.mark.parametrize("case, column, value, named", AGREEMENTS, ids=[c[0] for c in AGREEMENTS])
def test_a_bad_agreement_csv_is_refused_by_merge_and_e2e_resume(e2e_run, tmp_path, case, column, value, named):
    TRIED.add(("agreement.csv", case))
    bad = Path(shutil.copytree(e2e_run, tmp_path / "bad"))
    (bad / "agreement.csv").write_bytes(agreement_with(e2e_run, column, value))
    refused(["merge", bad, "--out", tmp_path / "all"], [f"{bad}/agreement.csv", *named], bad)
    before = measured(bad)
    assert_one_error_line(invoke(*E2E, "--resume", bad), f"{bad}/agreement.csv")
    assert measured(bad) == before


RESUME_ENV = [  # (case, env.json's e2e entries changed (... removes one), the field the error names)
    ("e2e-tp-size-a-string", {"tp": {"size": "1"}}, "e2e.tp.size"), ("e2e-tp-null", {"tp": None}, "e2e.tp"),
    ("e2e-model-args-a-list", {"model_args": [1]}, "e2e.model_args"),
    ("e2e-model-args-missing", {"model_args": ...}, "e2e.model_args"),
]


@pytest.mark.parametrize("case, change, field", RESUME_ENV, ids=[c[0] for c in RESUME_ENV])
def test_e2e_resume_of_an_env_json_with_wrong_types_is_one_line(e2e_run, tmp_path, case, change, field):
    TRIED.add(("e2e --resume env.json", case))
    bad = Path(shutil.copytree(e2e_run, tmp_path / "bad"))
    env = json.loads((bad / "env.json").read_text())
    env["e2e"] = {k: v for k, v in {**env["e2e"], **change}.items() if v is not ...}
    (bad / "env.json").write_text(json.dumps(env))
    before = measured(bad)
    assert_one_error_line(invoke(*E2E, "--resume", bad), f"{bad}/env.json: {field} ")
    assert measured(bad) == before


@pytest.mark.parametrize("case, shard", [("shard-index-a-string", {"index": "0", "count": 1}),
                                         ("shard-a-list", [0, 1]), ("shard-count-null", {"index": 0, "count": None})])
def test_kernel_resume_of_an_env_json_with_wrong_types_is_one_line(tmp_path, case, shard):
    TRIED.add(("kernel --resume env.json", case))
    out = tmp_path / "run"
    out.mkdir()
    (out / "results.csv").write_text("kind\n")
    (out / "env.json").write_text(json.dumps({"command": "attnbench kernel", "shard": shard}))
    before = snapshot(out)
    assert_one_error_line(invoke(*KERNEL, "--resume", out), f"{out}/env.json: shard")
    after = snapshot(out)
    assert {name: after.get(name) for name in before} == before
    assert {Path(name).name for name in after} - {Path(name).name for name in before} <= {".attnbench-files.json"}
