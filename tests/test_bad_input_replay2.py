"""Bad input to what replay's estimator, CPU defaults and merged shards added: `--steps`, a replay
run's representative rows (`bucket`, `step`, `steps`) edited by hand, and shards that do not make
one replay. Each is one `error:` line naming the flag, file or column, exit 1, no traceback, and
nothing lost: the trace, the runs read, an earlier run in --out, as they were. `-s` prints how many.
"""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
from bad_input_cli import invoke
from bad_results import counted, refused
from test_bad_input_replay import good_trace

TRIED: set[tuple[str, str]] = set()
count_what_was_tried = counted(TRIED, __name__)
FAST = ["--budget-ms", "2", "--device", "cpu", "--exact-sample", "1"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A whole replay and its two shards, to edit copies of."""
    root = tmp_path_factory.mktemp("runs")
    trace = good_trace(root / "t.jsonl")
    assert invoke("replay", trace, *FAST, "--out", root / "whole").exit_code == 0
    for i in range(2):
        assert invoke("replay", trace, *FAST, "--shard", f"{i}/2", "--out", root / f"shard{i}").exit_code == 0
    return root


@pytest.mark.parametrize("value", ["0", "-3", "1.5", "x", "", "nan"])
def test_a_bad_steps_is_one_line_naming_it(runs, value):
    TRIED.add(("--steps", value))
    refused(["replay", runs / "t.jsonl", *FAST, "--steps", value, "--out", runs / "whole", "--force"], ["--steps"],
            runs)


ROWS = {  # (column, value) written into every bucket row of results.csv -> words the error holds
    ("steps", "abc"): ["steps", "abc"],
    ("steps", "0"): ["steps", "weight above 0"],
    ("steps", "-2"): ["steps"],
    ("step", "1.5"): ["step", "whole number"],
    ("step", "x"): ["step"],
    ("bucket", "-1"): ["bucket"],
    ("bucket", "two"): ["bucket"],
}


@pytest.mark.parametrize("cell", list(ROWS), ids=lambda c: f"{c[0]}={c[1]}")
def test_an_edited_representative_row_is_one_line_for_plot_and_merge(runs, tmp_path, cell):
    column, value = cell
    TRIED.add(("row", f"{column}={value}"))
    for name in ("whole", "shard0"):
        edited = tmp_path / name
        shutil.copytree(runs / name, edited)
        table = pd.read_csv(edited / "results.csv", dtype=str, keep_default_na=False)
        table.loc[table["part"] == "bucket", column] = value
        table.to_csv(edited / "results.csv", index=False)
    refused(["plot", tmp_path / "whole", "--out", tmp_path / "plots"], ROWS[cell], tmp_path, runs)
    refused(["merge", tmp_path / "shard0", runs / "shard1", "--out", tmp_path / "merged"], ROWS[cell], tmp_path, runs)
    assert not (tmp_path / "merged").exists() or not any((tmp_path / "merged").iterdir())


def shard_copies(runs, tmp_path):
    for name in ("shard0", "shard1"):
        shutil.copytree(runs / name, tmp_path / name)
    return tmp_path / "shard0", tmp_path / "shard1"


BUCKETS = {  # what is done to one shard's buckets.csv -> words the error holds
    "removed": (lambda p: p.unlink(), ["buckets.csv"]),
    "empty": (lambda p: p.write_text(""), ["buckets.csv"]),
    "not csv": (lambda p: p.write_bytes(b"\xff\xfe\x00bad"), ["buckets.csv"]),
    "a column short": (lambda p: p.write_text("step,kind\n0,decode\n"), ["buckets.csv", "lacks"]),
    "another bucketing": (lambda p: p.write_text(p.read_text().replace(",0\n", ",1\n")), ["buckets.csv", "differs"]),
    "a step fewer": (lambda p: p.write_text("".join(p.read_text().splitlines(True)[:-1])), ["buckets.csv", "differs"]),
}


@pytest.mark.parametrize("name", list(BUCKETS))
def test_shards_whose_buckets_do_not_agree_are_refused_before_anything_is_written(runs, tmp_path, name):
    edit, words = BUCKETS[name]
    first, second = shard_copies(runs, tmp_path)
    edit(second / "buckets.csv")
    TRIED.add(("buckets.csv", name))
    refused(["merge", first, second, "--out", tmp_path / "merged"], words, first, second)
    assert not (tmp_path / "merged").exists() or not any((tmp_path / "merged").iterdir())


def test_a_replay_shard_beside_a_kernel_run_or_alone_twice(runs, tmp_path):
    assert invoke("kernel", "--heads", "2", "--dim", "16", "--tokens", "4", "--kind", "decode", "--context", "16",
                  "--budget-ms", "2", "--device", "cpu", "--out", tmp_path / "k").exit_code == 0
    cases = {"beside a kernel run": [runs / "shard0", tmp_path / "k"], "one shard twice": [runs / "shard0"] * 2,
             "one shard of two": [runs / "shard0"]}
    for name, inputs in cases.items():
        TRIED.add(("merge", name))
        refused(["merge", *inputs, "--out", tmp_path / "merged"], [], runs, tmp_path / "k")


def with_replay(value):
    return lambda env: {**env, "replay": value(env["replay"])}


ENVS = {  # what is done to the second shard's env.json -> words the error holds (merge exited 0 on ea3bb51)
    "another step count": (with_replay(lambda r: {**r, "steps": 99}), ["replay.steps", "99"]),
    "another trace": (with_replay(lambda r: {**r, "sha256": "0" * 64}), ["replay.sha256"]),
    "another bucket count": (with_replay(lambda r: {**r, "buckets": 7}), ["replay.buckets", "7"]),
    "replay a list": (with_replay(lambda r: [r]), ["replay is a list, not an object"]),
    "replay a string": (with_replay(lambda r: "x"), ["replay is the string"]),
    "steps a string": (with_replay(lambda r: {**r, "steps": "2"}), ["replay.steps is the string"]),
    "kinds a list": (with_replay(lambda r: {**r, "kinds": []}), ["replay.kinds"]),
    "no replay": (lambda env: {k: v for k, v in env.items() if k != "replay"}, ["replay is missing"]),
}


@pytest.mark.parametrize("name", list(ENVS))
@pytest.mark.parametrize("edited", [0, 1], ids=["first", "second"])
def test_shards_whose_env_tells_of_another_replay_are_refused(runs, tmp_path, name, edited):
    import json

    edit, words = ENVS[name]
    shards = shard_copies(runs, tmp_path)
    env = shards[edited] / "env.json"
    env.write_text(json.dumps(edit(json.loads(env.read_text()))))
    TRIED.add(("env.json", name))
    refused(["merge", *shards, "--out", tmp_path / "merged"], [str(shards[edited]), *words], *shards)
    assert not (tmp_path / "merged").exists() or not any((tmp_path / "merged").iterdir())
