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
                                         ("--folds", "101"), ("--folds", "many"), ("--seed", "x"),
                                         ("--seed", "-1"), ("--mode", "warm"), ("--mode", "Graph")])
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


def rows_of(run, change) -> None:
    rows = pd.read_csv(run / "results.csv", dtype=str, keep_default_na=False)
    change(rows)
    rows.to_csv(run / "results.csv", index=False)


def test_runs_that_mix_what_a_rule_holds_for(tmp_path, good):
    """A rule holds for one GPU and one version of each library: a run, or runs, that mix them are
    refused (rule.json would name one of them and hide the other)."""
    two_gpus, two_versions = write_run(tmp_path / "gpus"), write_run(tmp_path / "versions")
    rows_of(two_gpus, lambda rows: rows.__setitem__("gpu", ["NVIDIA H100" if i % 2 else "NVIDIA H200"
                                                             for i in range(len(rows))]))
    rows_of(two_versions, lambda rows: rows.__setitem__("library_version", [f"0.{i % 2}" for i in range(len(rows))]))
    newer = write_run(tmp_path / "newer", library_version="0.99.0")
    no_gpu = write_run(tmp_path / "nogpu", gpu="")
    cases = {"two GPUs in a run": ([two_gpus], ["GPUs", "NVIDIA H100", "NVIDIA H200", "one rule per GPU"]),
             "two versions in a run": ([two_versions], ["library versions", "'0.0'", "'0.1'"]),
             "two versions over runs": ([good, newer], ["the runs", "library versions", "0.99.0"]),
             "rows without a GPU": ([no_gpu], ["without a GPU name"])}
    for name, (runs, named) in cases.items():
        check(tmp_path, name, [*runs, "--out", tmp_path / "o"], named)
    assert not (tmp_path / "o").exists()


def test_the_same_run_twice_is_refused(tmp_path, good):
    for name, again in (("twice", good), ("twice, spelt otherwise", tmp_path / "." / "good"),
                        ("twice, through a link", tmp_path / "link")):
        if name.endswith("link"):
            (tmp_path / "link").symlink_to(good)
        check(tmp_path, f"the same run {name}", [good, again, "--out", tmp_path / "o"], ["RUN", "twice"])
    assert not (tmp_path / "o").exists()


def test_no_cell_with_two_choices_is_nothing_to_choose_between(tmp_path):
    """Two choices, each passing on other cells than the other: no cell can be chosen for."""
    run = write_run(tmp_path / "run", choices=("vllm-fa3 unified", "vllm-fa3 split"))
    rows_of(run, lambda rows: rows.__setitem__("verdict", ["pass" if (int(b) % 2 == 0) == (s == "unified") else "fail"
                                                           for b, s in zip(rows["bucket"], rows["strategy"])]))
    check(tmp_path, "no cell with two choices", [run, "--out", tmp_path / "o"], ["nothing to choose between"])
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("name, text, named", [
    ("not an object", "[]", ["env.json", "not an object"]),
    ("garbage", "\x89PNG\x00{", ["env.json", "JSON"]),
    ("no replay entry", "{}", ["env.json", "replay.trace"]),
    ("replay not an object", '{"replay": 3}', ["replay.trace"]),
    ("trace not a string", '{"replay": {"trace": 3}}', ["replay.trace"]),
    ("an empty trace", '{"replay": {"trace": " "}}', ["replay.trace"]),
    ("a wrong type", '{"replay": {"trace": "t"}, "gpu": "NVIDIA H200"}', ["env.json", "gpu"]),
    ("a bad digest", '{"replay": {"trace": "t", "sha256": "abc"}}', ["replay.sha256"]),
    ("absent", None, ["without env.json"]),
])
def test_a_broken_env_json_is_one_line(tmp_path, good, name, text, named):
    if text is None:
        (good / "env.json").unlink()
    else:
        (good / "env.json").write_bytes(text.encode("latin-1"))
    check(tmp_path, f"env.json: {name}", [good, "--out", tmp_path / "o"], ["RUN", *named])
    assert not (tmp_path / "o").exists()


@pytest.fixture(scope="module")
def a_rule(tmp_path_factory):
    """A rule fitted once on the good run, and that run: each hand edit changes a copy."""
    from bad_input_cli import invoke

    base = tmp_path_factory.mktemp("rule")
    run = write_run(base / "good")
    assert invoke("rule", "fit", run, "--out", base / "rule", "--max-depth", "2").exit_code == 0
    return base / "rule", run


def leaf(record) -> dict:
    node = record["tree"]
    while "choice" not in node:
        node = node["le"]
    return node


def deep(depth: int) -> dict:
    return {"choice": "vllm-fa3 split"} if depth == 0 else \
        {"feature": "decode_rows", "threshold": 1.0, "le": deep(depth - 1), "gt": {"choice": "vllm-fa3 split"}}


HAND_EDITS = {
    "an unknown choice": (lambda r: leaf(r).update(choice="fa9 unified"), ["tree", "choices"]),
    "a choice the rule does not list": (lambda r: leaf(r).update(choice="vllm-fa2 unified"), ["tree"]),
    "an unknown strategy in choices": (lambda r: r["choices"].append("vllm-fa3 sideways"), ["choices"]),
    "one choice": (lambda r: r.update(choices=r["choices"][:1]), ["choices"]),
    "no domain": (lambda r: r.pop("domain"), ["domain is missing"]),
    "a domain of no shape": (lambda r: r["domain"].update(shapes=[]), ["domain.shapes"]),
    "a NaN threshold": (lambda r: r["tree"].update(threshold=float("nan")), ["tree", "not a finite number"]),
    "an infinite weight": (lambda r: leaf(r).update(weight=float("inf")), ["not a finite number"]),
    "a code-like feature": (lambda r: r["tree"].update(feature="__import__('os')"), ["tree.feature"]),
    "a tree too deep": (lambda r: r.update(tree=deep(9)), ["deeper than 8"]),
    "an extra key in a node": (lambda r: leaf(r).update(code="x"), ["code"]),
    "another version": (lambda r: r.update(version=2), ["version"]),
    "an unknown mode": (lambda r: r["fit"].update(mode="warm"), ["fit.mode"]),
    "a negative seed": (lambda r: r["fit"].update(seed=-1), ["fit.seed"]),
    "gpu not a list": (lambda r: r.update(gpu="NVIDIA H200"), ["gpu"]),
    "an unknown backend's version": (lambda r: r["library_versions"].update({"x y": "1"}), ["library_versions"]),
}


@pytest.mark.parametrize("name", HAND_EDITS)
def test_a_hand_edited_rule_is_refused_by_apply(tmp_path, a_rule, name):
    import json
    import shutil

    fitted, run = a_rule
    edit, named = HAND_EDITS[name]
    out = shutil.copytree(fitted, tmp_path / "rule")
    record = json.loads((out / "rule.json").read_text())
    edit(record)
    (out / "rule.json").write_text(json.dumps(record))
    TRIED.add(f"apply: {name}")
    refused(["rule", "apply", out, run], ["RULE_DIR", *named], run)
