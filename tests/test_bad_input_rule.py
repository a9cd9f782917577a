"""Bad input to `attnbench rule fit`: each is one `error:` line naming the run or the flag, exit 1,
no traceback, and nothing lost: the runs read and an --out that held files, as they were; a
refused fit creates no --out. `-s` prints how many inputs were tried.
"""

from __future__ import annotations

import sys

import pandas as pd
import pytest
from bad_results import counted, refused
from rule_fixtures import write_run

pytest.importorskip("sklearn", reason="rule fit needs scikit-learn (the `rule` extra)")
TRIED: set[str] = set()
count_what_was_tried = counted(TRIED, __name__)


def check(tmp_path, name: str, args: list, named: list[str]) -> None:
    TRIED.add(name)
    refused(["rule", "fit", *args], named, tmp_path)


@pytest.fixture
def good(tmp_path):
    return write_run(tmp_path / "good")


@pytest.mark.parametrize("flag, value", [("--max-depth", "0"), ("--max-depth", "9"), ("--max-depth", "-1"),
                                         ("--max-depth", "x"), ("--max-depth", "2.5"), ("--folds", "1"),
                                         ("--folds", "101"), ("--folds", "many"), ("--seed", "x")])
def test_a_bad_flag_is_one_line_naming_it(tmp_path, good, flag, value):
    check(tmp_path, f"{flag} {value}", [good, "--out", tmp_path / "o", flag, value], [flag])
    assert not (tmp_path / "o").exists()


def test_runs_that_are_not_runs(tmp_path, good):
    (tmp_path / "file.csv").write_text("a,b\n1,2\n")
    (tmp_path / "empty").mkdir()
    e2e = tmp_path / "e2e"
    e2e.mkdir()
    (e2e / "results.csv").write_text("input_len,request_p50_s,verdict\n8,0.1,pass\n")
    bad = {"missing": (tmp_path / "none", ["RUN", "none"]), "a file": (tmp_path / "file.csv", ["RUN", "file.csv"]),
           "no results.csv": (tmp_path / "empty", ["RUN", "results.csv"]), "e2e run": (e2e, ["RUN"])}
    for name, (run, named) in bad.items():
        check(tmp_path, name, [run, "--out", tmp_path / "o"], named)
    assert not (tmp_path / "o").exists()


def test_runs_without_what_a_rule_needs(tmp_path):
    failed = write_run(tmp_path / "failed", verdict="fail")
    single = write_run(tmp_path / "single", choices=("vllm-fa3 split",))
    one_cell = write_run(tmp_path / "one", prefills=(8,))
    no_buckets = write_run(tmp_path / "nobuckets")
    (no_buckets / "buckets.csv").unlink()
    short = write_run(tmp_path / "short")
    (short / "buckets.csv").write_text("step,kind,decode_rows,query_tokens,kv_tokens,bucket\n0,mixed,4,12,600,0\n")
    older = write_run(tmp_path / "older")
    pd.read_csv(older / "results.csv").drop(columns=["num_decode_seqs"]).to_csv(older / "results.csv", index=False)
    garbled = write_run(tmp_path / "garbled")
    (garbled / "buckets.csv").write_text("step,bucket\n0,x\n")
    cases = {"no timings": (failed, ["no passing timed rows"]), "older columns": (older, ["num_decode_seqs"]),
             "garbled buckets.csv": (garbled, ["buckets.csv"]), "one choice": (single, ["one choice"]),
             "one cell": (one_cell, ["at least 2"]), "no buckets.csv": (no_buckets, ["buckets.csv"]),
             "a bucket without steps": (short, ["buckets.csv", "bucket 1"]),
             "another mode": (write_run(tmp_path / "m"), ["mode eager"])}
    for name, (run, named) in cases.items():
        flags = ["--mode", "eager"] if name == "another mode" else []
        check(tmp_path, name, [run, "--out", tmp_path / "o", *flags], named)
    eager, other_gpu = write_run(tmp_path / "eager", mode="eager"), write_run(tmp_path / "gpu", gpu="NVIDIA H100")
    check(tmp_path, "two modes", [tmp_path / "m", eager, "--out", tmp_path / "o"], ["different modes", "--mode"])
    check(tmp_path, "two GPUs", [tmp_path / "m", other_gpu, "--out", tmp_path / "o"], ["different GPUs"])
    assert not (tmp_path / "o").exists()


def test_bad_places_to_write_lose_nothing(tmp_path, good):
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("keep me")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "a-file").write_text("keep me too")
    cases = {"non-empty": (full, ["--out", "not empty"]), "symlink": (tmp_path / "link", ["--out", "symlink"]),
             "a file": (tmp_path / "a-file", ["--out", "is a file"])}
    for name, (out, named) in cases.items():
        check(tmp_path, name, [good, "--out", out], named)
    assert list((tmp_path / "real").iterdir()) == []


def test_bad_rule_dirs_for_apply(tmp_path, good):
    cases = {"no rule.json": "", "not json": "{", "not a rule": '{"format": "x"}',
             "bad feature": '{"format": "attnbench-rule", "tree": {"feature": "x", "threshold": 1, "le": {}, "gt": {}}}',
             "bad threshold": '{"format": "attnbench-rule", "tree": {"feature": "decode_rows", "threshold": "a"}}',
             "bad choice": '{"format": "attnbench-rule", "tree": {"choice": "fa3"}}'}
    for name, text in cases.items():
        rule_dir = tmp_path / name.replace(" ", "-")
        rule_dir.mkdir()
        if text:
            (rule_dir / "rule.json").write_text(text)
        TRIED.add(f"apply: {name}")
        refused(["rule", "apply", rule_dir, good], ["RULE_DIR"], tmp_path)


def test_without_scikit_learn_fit_says_how_to_install_it(tmp_path, good, monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn raises ImportError
    check(tmp_path, "no scikit-learn", [good, "--out", tmp_path / "o"], ["pip install", "scikit-learn"])
    assert not (tmp_path / "o").exists()
