"""`--shard I/N` and `attnbench merge`, on the CPU.

The split is checked as a partition (every point in exactly one shard, sizes within one) for
many N, not against the rule's own helper; then shard runs merged must hold exactly the keys of
the unsharded run, and merge must refuse what would make a wrong run: two different rows for one
measurement, another GPU, something that is not a run directory.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.kernels.plan import KernelArgs
from attnbench.runs.kernel import plan_kernel
from attnbench.results.files import KEY_COLUMNS

SWEEP = ["kernel", "--heads", "4", "--kv-heads", "2", "--dim", "32", "--tokens", "4,8,12", "--kind", "decode,prefill",
         "--context", "32", "--budget-ms", "2", "--device", "cpu"]
E2E = ["e2e", "--model", "tiny", "--warmup", "0", "--iters", "1", "--device", "cpu", "--input-len", "8",
       "--output-len", "3"]


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def keys(out) -> set[tuple]:
    df = pd.read_csv(out / "results.csv")
    return set(df[KEY_COLUMNS].astype(str).itertuples(index=False, name=None))


def error_line(result) -> str:
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and lines[-1].startswith("error: "), result.output
    assert "Traceback" not in result.output
    return lines[-1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The whole sweep once, and as shards 0/2 and 1/2."""
    root = tmp_path_factory.mktemp("shards")
    for name, extra in (("full", []), ("s0", ["--shard", "0/2"]), ("s1", ["--shard", "1/2"])):
        result = invoke(*SWEEP, *extra, "--out", root / name)
        assert result.exit_code == 0, result.output
    return root


def test_shards_partition_the_plan_for_any_count():
    args = KernelArgs(shapes=[(4, 32), (8, 64)], kv_heads=2, tokens=[4, 8, 12, 16, 20], kind=["decode", "prefill"],
                      context="32", device="cpu")
    every = plan_kernel(args).points
    for count in range(1, 8):
        shards = [plan_kernel(KernelArgs(**{**vars(args), "shard": f"{i}/{count}"})).points for i in range(count)]
        seen = [p for shard in shards for p in shard]
        assert sorted(map(repr, seen)) == sorted(map(repr, every)), count  # disjoint, and the whole plan
        assert max(map(len, shards)) - min(map(len, shards)) <= 1, count
        for shard in shards:  # each in plan order
            assert [every.index(p) for p in shard] == sorted(every.index(p) for p in shard)


@pytest.mark.parametrize("shard, says", [
    ("2/2", "must be below N"), ("1", "expected I/N"), ("-1/2", "expected I/N"), ("0/0", "N must be from 1"),
    ("a/b", "expected I/N"), ("1/2/3", "expected I/N"), ("6/7", "has 6 point(s), so shard 6 of 7 gets none"),
])
def test_a_bad_shard_is_one_line(tmp_path, shard, says):
    line = error_line(invoke(*SWEEP, "--shard", shard, "--out", tmp_path / "run"))
    assert line.startswith("error: --shard") and says in line
    assert not (tmp_path / "run").exists()


def test_shards_merged_hold_the_keys_of_the_unsharded_run(runs, tmp_path):
    assert keys(runs / "s0") and keys(runs / "s0").isdisjoint(keys(runs / "s1"))
    env = json.loads((runs / "s1" / "env.json").read_text())
    assert env["shard"] == {"index": 1, "count": 2, "points": 3}
    result = invoke("merge", runs / "s0", runs / "s1", "--out", tmp_path / "all")
    assert result.exit_code == 0, result.output
    assert keys(tmp_path / "all") == keys(runs / "full")
    for name in ("summary.md", "env.json"):
        assert (tmp_path / "all" / name).is_file()
    merged = json.loads((tmp_path / "all" / "env.json").read_text())["merged"]
    assert [i["shard"]["index"] for i in merged["inputs"]] == [0, 1] and merged["missing_shards"] == []
    assert merged["complete"] is True
    assert "shard" not in json.loads((tmp_path / "all" / "env.json").read_text())


def test_a_missing_shard_is_refused_and_said_with_partial(runs, tmp_path):
    line = error_line(invoke("merge", runs / "s0", "--out", tmp_path / "part"))
    assert "shard(s) 1/2 of the split are not among the inputs" in line and "--partial" in line
    assert not (tmp_path / "part").exists()
    result = invoke("merge", runs / "s0", "--out", tmp_path / "part", "--partial")
    assert result.exit_code == 0, result.output
    assert "shard(s) 1/2 of the split are not among the inputs" in " ".join(result.output.split())
    merged = json.loads((tmp_path / "part" / "env.json").read_text())["merged"]
    assert merged["missing_shards"] == ["1/2"] and merged["complete"] is False


def test_a_row_held_twice_identically_is_kept_once(runs, tmp_path):
    shutil.copytree(runs / "full", tmp_path / "copy")
    result = invoke("merge", runs / "full", tmp_path / "copy", "--out", tmp_path / "all")
    assert result.exit_code == 0, result.output
    assert len(pd.read_csv(tmp_path / "all" / "results.csv")) == len(pd.read_csv(runs / "full" / "results.csv"))


def test_two_different_rows_for_one_measurement_are_refused(runs, tmp_path):
    line = error_line(invoke("merge", runs / "full", runs / "s1", "--out", tmp_path / "all", "--partial"))
    assert "both hold" in line and "with different results" in line and str(runs / "s1") in line
    assert not (tmp_path / "all").exists()


def test_another_gpu_is_refused_unless_allowed(runs, tmp_path):
    shutil.copytree(runs / "s1", tmp_path / "h200")
    env = json.loads((tmp_path / "h200" / "env.json").read_text())
    env["gpu"] = {"name": "NVIDIA H200"}
    (tmp_path / "h200" / "env.json").write_text(json.dumps(env))
    line = error_line(invoke("merge", runs / "s0", tmp_path / "h200", "--out", tmp_path / "all"))
    assert "gpu.name" in line and "NVIDIA H200" in line and "--allow-mixed" in line
    result = invoke("merge", runs / "s0", tmp_path / "h200", "--out", tmp_path / "all", "--allow-mixed")
    assert result.exit_code == 0, result.output
    assert "gpu.name" in json.loads((tmp_path / "all" / "env.json").read_text())["merged"]["mixed"]


@pytest.mark.parametrize("bad, says", [
    ("missing", "is not a run directory: it does not exist"),
    ("empty", "is not a run directory: it holds no results.csv"),
    ("file", "is not a run directory: it is a file"),
    ("twice", "is given twice"),
    ("out", "--out: "),
])
def test_what_is_not_a_run_to_merge_is_one_line(runs, tmp_path, bad, says):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    inputs = {"missing": [tmp_path / "missing"], "empty": [tmp_path / "empty"], "file": [tmp_path / "file"],
              "twice": [runs / "s0"], "out": []}[bad]
    out = runs / "s1" if bad == "out" else tmp_path / "all"
    line = error_line(invoke("merge", runs / "s0", *inputs, "--out", out))
    assert says in line


def test_e2e_runs_merge_and_do_not_mix_with_kernel_runs(runs, tmp_path):
    for batch in (1, 2):
        result = invoke(*E2E, "--batch-size", batch, "--out", tmp_path / f"b{batch}")
        assert result.exit_code == 0, result.output
    result = invoke("merge", tmp_path / "b1", tmp_path / "b2", "--out", tmp_path / "all")
    assert result.exit_code == 0, result.output
    rows = pd.read_csv(tmp_path / "all" / "results.csv")
    assert sorted(set(rows["batch_size"])) == [1, 2] and len(rows) == 4
    assert len(pd.read_csv(tmp_path / "all" / "agreement.csv")) == 2
    line = error_line(invoke("merge", runs / "s0", tmp_path / "b1", "--out", tmp_path / "mixed"))
    assert "merge takes runs of one kind" in line


def test_force_over_a_merged_run_keeps_what_attnbench_did_not_write(runs, tmp_path):
    out = tmp_path / "all"
    assert invoke("merge", runs / "s0", runs / "s1", "--out", out).exit_code == 0
    mine = {out / "notes.txt": b"mine", out / "mine.png": b"png", out / "context-mine" / "x": b"x",
            out / ".notes.txt.tmp": b"tmp"}
    (out / "context-mine").mkdir()
    for path, data in mine.items():
        path.write_bytes(data)
    result = invoke("merge", runs / "s0", runs / "s1", "--out", out, "--force")
    assert result.exit_code == 0, result.output
    assert {path: path.read_bytes() for path in mine} == mine
    assert keys(out) == keys(runs / "full")


def test_a_torchrun_run_and_its_failed_rank_measured_as_a_shard_make_a_whole_split():
    from attnbench.results.shards import check_split, shares_of, sweep_flags

    ranks = [{"rank": 0, "status": "ok"}, {"rank": 1, "status": "error: OOM"}]
    torchrun = shares_of(Path("tr"), {"command": "attnbench kernel --heads 32 --dim 128 --out tr",
                                      "distributed": {"ranks": ranks}})
    shard = shares_of(Path("s1"), {"command": "attnbench kernel --dim=128 --out s1 --shard 1/2 --heads 32 --force",
                                   "shard": {"index": 1, "count": 2}})
    assert check_split([torchrun, shard], partial=False) == {"shards": {"/2": [0, 1]}, "missing_shards": [],
                                                             "complete": True}
    assert sweep_flags("attnbench run s.toml --shard 0/2 --no-causal") == {"arguments": "run s.toml", "--no-causal": ""}
